//! The names llama.cpp gives the parts of a split GGUF model
//! (`NAME-00001-of-00003.gguf`).

/// `(prefix, part, parts, extension)` of a split part's name
/// (`PREFIX-00002-of-00003.gguf`, five digits each, as llama.cpp writes them).
pub fn split_name(name: &str) -> Option<(&str, usize, usize, &str)> {
    let (stem, ext) = name.split_at(name.len().checked_sub(5)?);
    if !ext.eq_ignore_ascii_case(".gguf") {
        return None;
    }
    // "-00001-of-00003" is 15 bytes.
    let (prefix, tail) = stem.split_at(stem.len().checked_sub(15)?);
    let b = tail.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<usize> {
        b[r.clone()].iter().all(u8::is_ascii_digit).then(|| tail[r].parse().ok())?
    };
    if b[0] != b'-' || &tail[6..10] != "-of-" || prefix.is_empty() {
        return None;
    }
    let (no, of) = (digits(1..6)?, digits(10..15)?);
    (no >= 1 && no <= of).then_some((prefix, no, of, ext))
}

/// The file name of part `no` of a split model whose first part is `first`.
pub fn part_name(first: &str, no: usize) -> Option<String> {
    let (prefix, _, of, ext) = split_name(first)?;
    Some(format!("{prefix}-{no:05}-of-{of:05}{ext}"))
}
