//! FNV-1a (64-bit): a hash that is the same on every machine and Rust release, for what af must
//! recognise across runs: tagger features, input files, per-item seeds.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// Streaming FNV-1a, for input larger than memory.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(OFFSET)
    }
}

impl Fnv1a {
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME);
        }
    }

    pub fn finish(self) -> u64 {
        self.0
    }
}

/// FNV-1a of a whole byte string.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a::default();
    h.update(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_values_and_streaming_agree() {
        assert_eq!(super::fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let mut h = super::Fnv1a::default();
        h.update(b"foo");
        h.update(b"bar");
        assert_eq!(h.finish(), super::fnv1a64(b"foobar"));
    }
}
