//! The mutations of the readers' fuzzer (issue 17): the damage a user's file really has
//! (truncation, flipped bytes, invalid UTF-8, byte-order marks, CRLF, huge numbers, NaN and
//! infinities, wrong types, missing, extra and repeated fields, very long lines, deep nesting),
//! and since issue 44 what readers once accepted silently: finite floats that overflow float32
//! arithmetic, numbers where text belongs, empty values, control characters, CR-only line
//! endings, a repeated id, and a damaged first line.
//! Self-contained, with its own small generator: af-io's fuzzer and af-cli's fuzz test both
//! mutate with it.

/// SplitMix64: deterministic from its seed, enough to choose mutations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The mutations by name, in the order [`mutate_once`] chooses among them.
pub const KINDS: &[&str] = &[
    "truncate",
    "flip-bytes",
    "invalid-utf8",
    "bom",
    "crlf",
    "huge-number",
    "non-finite",
    "wrong-type",
    "delete-field",
    "repeat-field",
    "repeat-line",
    "delete-line",
    "long-line",
    "deep-nesting",
    "syntax-char",
    "empty",
    "splice",
    "float32-edge",
    "number-as-text",
    "empty-value",
    "control-char",
    "cr-only",
    "duplicate-id",
    "bad-first-line",
];

/// One mutation of `input`; `other` is another seed to splice from. `long` caps the size of a
/// long line (bytes).
pub fn mutate_once(
    input: &[u8],
    other: &[u8],
    rng: &mut Rng,
    long: usize,
) -> (Vec<u8>, &'static str) {
    let kind = *rng.pick(KINDS);
    (apply(kind, input, other, rng, long), kind)
}

/// 1 to 3 mutations stacked; returns the result and the names of the mutations applied.
pub fn mutate(
    input: &[u8],
    other: &[u8],
    rng: &mut Rng,
    long: usize,
) -> (Vec<u8>, Vec<&'static str>) {
    let n = 1 + rng.below(3);
    let mut out = input.to_vec();
    let mut kinds = Vec::new();
    for _ in 0..n {
        let (next, kind) = mutate_once(&out, other, rng, long);
        out = next;
        kinds.push(kind);
    }
    (out, kinds)
}

pub fn apply(kind: &str, input: &[u8], other: &[u8], rng: &mut Rng, long: usize) -> Vec<u8> {
    let mut b = input.to_vec();
    let pos = |rng: &mut Rng, b: &[u8]| rng.below(b.len() + 1);
    match kind {
        "truncate" => {
            let at = pos(rng, &b);
            b.truncate(at);
        }
        "flip-bytes" => {
            if !b.is_empty() {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
            }
        }
        "invalid-utf8" => {
            let bad: &[&[u8]] = &[
                b"\xff",
                b"\xc3",
                b"\xed\xa0\x80",
                b"\xe9",
                b"\xf8\x88\x80\x80\x80",
                b"\xc0\xaf",
                b"\x80",
            ];
            let at = pos(rng, &b);
            let bad = rng.pick(bad);
            b.splice(at..at, bad.iter().copied());
        }
        "bom" => {
            let at = if rng.below(4) == 0 { pos(rng, &b) } else { 0 };
            let times = 1 + rng.below(2);
            for _ in 0..times {
                b.splice(at..at, b"\xef\xbb\xbf".iter().copied());
            }
        }
        "crlf" => {
            b = match rng.below(3) {
                0 => replace_all(&b, b"\n", b"\r\n"),
                1 => replace_all(&b, b"\n", b"\r"),
                _ => {
                    let at = pos(rng, &b);
                    b.splice(at..at, b"\r".iter().copied());
                    b
                }
            }
        }
        "huge-number" => {
            let huge: &[&str] = &[
                "1e400",
                "-1e400",
                "99999999999999999999999999",
                "18446744073709551616",
                "4294967296",
                "65536",
                "-1",
                "-0",
                "1e-400",
                "0x10",
                "1.7976931348623157e309",
                "340282366920938463463374607431768211456",
                "1_000",
            ];
            let with = rng.pick(huge).as_bytes().to_vec();
            b = replace_number(&b, &with, rng);
        }
        "non-finite" => {
            let nf: &[&str] = &[
                "NaN",
                "nan",
                "-nan",
                "inf",
                "-inf",
                "Infinity",
                "-Infinity",
                "infinity",
                "1e39",
            ];
            let with = rng.pick(nf).as_bytes().to_vec();
            b = replace_number(&b, &with, rng);
        }
        "wrong-type" => {
            let values: &[&str] = &[
                "1",
                "-7.5",
                "true",
                "null",
                "[]",
                "{}",
                "[\"a\", 1]",
                "{\"ending\": 3}",
                "\"\"",
                "\"x\"",
                "[[]]",
            ];
            let with = rng.pick(values).as_bytes().to_vec();
            b = replace_value(&b, &with, rng);
        }
        "delete-field" => {
            // From one separator (`,` or a tab) to the next on the same line.
            if let Some((s, e)) = field_span(&b, rng) {
                b.drain(s..e);
            }
        }
        "repeat-field" => {
            if let Some((s, e)) = field_span(&b, rng) {
                let copy = b[s..e].to_vec();
                b.splice(e..e, copy);
            }
        }
        "repeat-line" | "delete-line" => {
            let lines = line_spans(&b);
            if !lines.is_empty() {
                let (s, e) = *rng.pick(&lines);
                if kind == "delete-line" {
                    b.drain(s..e);
                } else {
                    let copy = b[s..e].to_vec();
                    b.splice(e..e, copy);
                }
            }
        }
        "long-line" => {
            let unit: &[&[u8]] = &[b"word ", b"a", b"1,", b"\"x\",", b"\t", b"_", b"9"];
            let unit = rng.pick(unit);
            let n = (long / unit.len()).max(1) >> rng.below(4);
            let chunk: Vec<u8> = unit.iter().copied().cycle().take(unit.len() * n).collect();
            let at = pos(rng, &b);
            b.splice(at..at, chunk);
        }
        "deep-nesting" => {
            let depth = [64, 200, 5_000, 50_000][rng.below(4)];
            let (open, close): (&[u8], &[u8]) = *rng.pick(&[
                (&b"["[..], &b"]"[..]),
                (b"{\"a\":", b"}"),
                (b"[{\"k\":[", b"]}]"),
            ]);
            let mut chunk = Vec::new();
            for _ in 0..depth {
                chunk.extend_from_slice(open);
            }
            chunk.push(b'1');
            if rng.below(2) == 0 {
                for _ in 0..depth {
                    chunk.extend_from_slice(close);
                }
            }
            let at = if rng.below(2) == 0 {
                value_start(&b, rng).unwrap_or(0)
            } else {
                pos(rng, &b)
            };
            b.splice(at..at, chunk);
        }
        "syntax-char" => {
            let chars: &[&[u8]] = &[
                b"\"", b",", b"\t", b"\n", b"\\", b"{", b"}", b"[", b"]", b":", b"_", b"\0",
                b"\n\n", b"#", b"=", b"'",
            ];
            let at = pos(rng, &b);
            let c = rng.pick(chars);
            b.splice(at..at, c.iter().copied());
        }
        "empty" => {
            b = [
                &b""[..],
                b"\n",
                b"   \n\n",
                b"\xef\xbb\xbf",
                b"{}",
                b"[]",
                b"null",
            ][rng.below(7)]
            .to_vec();
            // Keep only the header (first line) half of the time: a file with no rows.
            if rng.below(2) == 0 {
                if let Some(end) = input.iter().position(|&c| c == b'\n') {
                    b = input[..=end].to_vec();
                }
            }
        }
        "splice" => {
            if !other.is_empty() {
                let s = rng.below(other.len());
                let e = s + rng.below(other.len() - s + 1);
                let at = pos(rng, &b);
                b.splice(at..at, other[s..e].iter().copied());
            }
        }
        "float32-edge" => {
            // Finite float32 values whose sums and squares overflow float32 (issue 44), made
            // a whole column at times: a constant 3e38 column made every AFLite score NaN.
            let edge: &[&str] = &[
                "3e38",
                "-3e38",
                "3.4028235e38",
                "-3.4028235e38",
                "1e38",
                "1e-45",
                "3.5e38",
            ];
            let with = rng.pick(edge).as_bytes().to_vec();
            if rng.below(2) == 0 {
                b = replace_number(&b, &with, rng);
            } else {
                b = replace_column(&b, &with, rng);
            }
        }
        "number-as-text" => {
            // A string value (text, an id, a group) made a number: `1e-400` parses to 0.0.
            let numbers: &[&str] = &["1e-400", "7", "-0", "1.5", "0", "1e400"];
            let with = rng.pick(numbers).as_bytes().to_vec();
            b = replace_string(&b, &with, rng);
        }
        "empty-value" => {
            // An empty string or CSV cell: an empty caption, group, id or label.
            b = if rng.below(2) == 0 {
                replace_string(&b, b"\"\"", rng)
            } else {
                match field_span(&b, rng) {
                    Some((s, e)) => {
                        b.drain(s..e - 1);
                        b
                    }
                    None => b,
                }
            };
        }
        "control-char" => {
            // Inside a string or a cell: a NUL byte, an escape, DEL, a C1 control, or JSON's
            // escaped forms of them.
            let chars: &[&[u8]] = &[
                b"\0",
                b"\x01",
                b"\x1b[0m",
                b"\x7f",
                "\u{85}".as_bytes(),
                "\u{9b}".as_bytes(),
                b"\\u0000",
                b"\\u001b",
            ];
            let c = rng.pick(chars);
            let inside = string_spans(&b);
            let at = if inside.is_empty() {
                pos(rng, &b)
            } else {
                let (s, e) = *rng.pick(&inside);
                s + 1 + rng.below(e - s - 1)
            };
            b.splice(at..at, c.iter().copied());
        }
        "cr-only" => {
            // Classic Mac OS line endings, everywhere or only at the end of the file.
            b = replace_all(&replace_all(&b, b"\r\n", b"\n"), b"\n", b"\r");
        }
        "duplicate-id" => {
            // The first value of one line copied over the first value of another: JSONL files
            // put the id first, and so do af's CSV seeds.
            let lines = line_spans(&b);
            if lines.len() >= 2 {
                let a = rng.below(lines.len());
                let mut c = rng.below(lines.len() - 1);
                if c >= a {
                    c += 1;
                }
                let first = |(s, e): (usize, usize)| -> Option<(usize, usize)> {
                    let line = &b[s..e];
                    match line.iter().position(|&x| x == b':') {
                        Some(colon) => {
                            let mut i = colon + 1;
                            while i < line.len() && line[i] == b' ' {
                                i += 1;
                            }
                            Some((s + i, s + value_end(line, i)))
                        }
                        None => {
                            let end = line.iter().position(|&x| x == b',')?;
                            Some((s, s + end))
                        }
                    }
                };
                if let (Some((fs, fe)), Some((ts, te))) = (first(lines[a]), first(lines[c])) {
                    let copy = b[fs..fe].to_vec();
                    b.splice(ts..te, copy);
                }
            }
        }
        "bad-first-line" => {
            // Line 1 only (a header, or the line a JSONL layout is told by): a field dropped, a
            // key renamed, deep nesting, or garbage.
            let end = b.iter().position(|&c| c == b'\n').unwrap_or(b.len());
            let mut first = b[..end].to_vec();
            match rng.below(4) {
                0 => {
                    if let Some((s, e)) = field_span(&first, rng) {
                        first.drain(s..e);
                    }
                }
                1 => {
                    let spans = string_spans(&first);
                    if !spans.is_empty() {
                        let (s, _) = *rng.pick(&spans);
                        first.splice(s + 1..s + 1, b"x_".iter().copied());
                    }
                }
                2 => {
                    let mut deep = b"{\"a\":".repeat(300);
                    deep.extend_from_slice(&first);
                    first = deep;
                }
                _ => first = b"\x01garbage, not a header".to_vec(),
            }
            b.splice(..end, first);
        }
        _ => unreachable!("unknown mutation {kind}"),
    }
    b
}

/// The spans of JSON strings (quotes included), as (start, end).
fn string_spans(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let e = value_end(b, i);
            out.push((i, e.max(i + 1)));
            i = e.max(i + 1);
        } else {
            i += 1;
        }
    }
    out.retain(|(s, e)| e - s >= 2);
    out
}

/// Replaces a JSON string value (after a `:`, or inside a list) with `with`; a CSV cell when the
/// input has no quotes.
fn replace_string(b: &[u8], with: &[u8], rng: &mut Rng) -> Vec<u8> {
    let spans: Vec<(usize, usize)> = string_spans(b)
        .into_iter()
        .filter(|(s, e)| {
            // A value, not a key: not followed by `:`.
            let mut j = *e;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            j >= b.len() || b[j] != b':' || *s == 0
        })
        .collect();
    let mut b = b.to_vec();
    if spans.is_empty() {
        if let Some((s, e)) = field_span(&b, rng) {
            b.splice(s..e - 1, with.iter().copied());
        }
        return b;
    }
    let (s, e) = *rng.pick(&spans);
    b.splice(s..e, with.iter().copied());
    b
}

/// Replaces the same comma-separated column of every line but the first with `with`: a
/// constant column.
fn replace_column(b: &[u8], with: &[u8], rng: &mut Rng) -> Vec<u8> {
    let lines = line_spans(b);
    let column = rng.below(4);
    let mut out = Vec::with_capacity(b.len());
    for (n, &(s, e)) in lines.iter().enumerate() {
        let line = &b[s..e];
        let cells: Vec<&[u8]> = line.split(|&c| c == b',').collect();
        if n == 0 || column >= cells.len() {
            out.extend_from_slice(line);
            continue;
        }
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if i == column {
                out.extend_from_slice(with);
                if cell.ends_with(b"\n") {
                    out.push(b'\n');
                }
            } else {
                out.extend_from_slice(cell);
            }
        }
    }
    out
}

fn replace_all(b: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Runs of digits (with `.`, `e`, `-` inside) as (start, end).
fn numbers(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = i;
            while i < b.len()
                && (b[i].is_ascii_digit() || matches!(b[i], b'.' | b'e' | b'E' | b'-' | b'+'))
            {
                i += 1;
            }
            out.push((s, i));
        } else {
            i += 1;
        }
    }
    out
}

fn replace_number(b: &[u8], with: &[u8], rng: &mut Rng) -> Vec<u8> {
    let spans = numbers(b);
    let mut b = b.to_vec();
    if spans.is_empty() {
        let at = rng.below(b.len() + 1);
        b.splice(at..at, with.iter().copied());
    } else {
        let (s, e) = *rng.pick(&spans);
        b.splice(s..e, with.iter().copied());
    }
    b
}

/// Where a JSON value starts: after a `:` (and spaces).
fn value_start(b: &[u8], rng: &mut Rng) -> Option<usize> {
    let colons: Vec<usize> = b
        .iter()
        .enumerate()
        .filter(|(_, c)| **c == b':')
        .map(|(i, _)| i + 1)
        .collect();
    if colons.is_empty() {
        return None;
    }
    let mut i = *rng.pick(&colons);
    while i < b.len() && b[i] == b' ' {
        i += 1;
    }
    Some(i)
}

/// Replaces the value after a random `:` (a string, number, literal, or a whole list/object).
fn replace_value(b: &[u8], with: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = b.to_vec();
    let Some(s) = value_start(&b, rng) else {
        // No JSON here (CSV, text): replace a field instead.
        if let Some((s, e)) = field_span(&b, rng) {
            b.splice(s..e, with.iter().copied());
        }
        return b;
    };
    let e = value_end(&b, s);
    b.splice(s..e, with.iter().copied());
    b
}

fn value_end(b: &[u8], s: usize) -> usize {
    let mut i = s;
    if i >= b.len() {
        return i;
    }
    match b[i] {
        b'"' => {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            (i + 1).min(b.len())
        }
        b'[' | b'{' => {
            let mut depth = 0usize;
            let mut in_str = false;
            while i < b.len() {
                match b[i] {
                    b'\\' if in_str => i += 1,
                    b'"' => in_str = !in_str,
                    b'[' | b'{' if !in_str => depth += 1,
                    b']' | b'}' if !in_str => {
                        depth -= 1;
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            b.len()
        }
        _ => {
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b'\n') {
                i += 1;
            }
            i
        }
    }
}

/// A span from one separator (`,`, tab or `\n`) up to and including the next `,` or tab.
fn field_span(b: &[u8], rng: &mut Rng) -> Option<(usize, usize)> {
    let seps: Vec<usize> = b
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(**c, b',' | b'\t'))
        .map(|(i, _)| i)
        .collect();
    if seps.is_empty() {
        return None;
    }
    let e = *rng.pick(&seps) + 1;
    let mut s = e - 1;
    while s > 0 && !matches!(b[s - 1], b',' | b'\t' | b'\n') {
        s -= 1;
    }
    Some((s, e))
}

/// Each line with its newline, as (start, end).
fn line_spans(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = 0;
    for (i, c) in b.iter().enumerate() {
        if *c == b'\n' {
            out.push((s, i + 1));
            s = i + 1;
        }
    }
    if s < b.len() {
        out.push((s, b.len()));
    }
    out
}
