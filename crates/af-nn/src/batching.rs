//! Training batches of similar lengths, drawn at random ("sortish" bucketing, as in AllenNLP's
//! bucket iterator and fastai's SortishSampler), for the committee.
//!
//! A batch is padded to its longest sequence and the recurrent and convolutional nets pay for
//! the padding: batches of HellaSwag-like questions drawn at random were 24-37% real tokens.
//! Sorting windows of shuffled examples by length before cutting them into batches brings that to
//! 60-80%, and which examples meet in a batch, and the batches' order, stay random.

/// A window of this many batches' worth of shuffled examples is sorted by length at a time: large
/// enough that most batches hold similar lengths, small enough that a batch's members are drawn
/// from a random 1/N-th of the data, not always the same neighbours.
pub const WINDOW_BATCHES: usize = 32;

/// `order` (already shuffled) cut into batches of at most `size`, each from one window of
/// [`WINDOW_BATCHES`] batches sorted by `len` (stably: equal lengths keep their shuffled order).
/// The caller shuffles the batches.
pub fn length_sorted_windows(order: &[usize], len: impl Fn(usize) -> usize, size: usize) -> Vec<Vec<usize>> {
    let size = size.max(1);
    let mut batches = Vec::with_capacity(order.len().div_ceil(size));
    for window in order.chunks(size * WINDOW_BATCHES) {
        let mut window = window.to_vec();
        window.sort_by_key(|&i| len(i));
        batches.extend(window.chunks(size).map(<[usize]>::to_vec));
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_sorted_and_keep_every_example_once() {
        let order: Vec<usize> = (0..100).rev().collect();
        let lens = |i: usize| (i * 37) % 11;
        let batches = length_sorted_windows(&order, lens, 3);
        let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
        // 3 x 32 = 96 examples per window: the first window's batches run from short to long.
        let first: Vec<usize> = batches[..32].iter().flatten().map(|&i| lens(i)).collect();
        assert!(first.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(batches.len(), 34);
    }
}
