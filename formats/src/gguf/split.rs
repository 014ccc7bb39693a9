//! The names llama.cpp gives the parts of a split GGUF model
//! (`NAME-00001-of-00003.gguf`).

/// `(prefix, part, parts, extension)` of a split part's name
/// (`PREFIX-00002-of-00003.gguf`, five digits each, as llama.cpp writes them).
pub fn split_name(name: &str) -> Option<(&str, usize, usize, &str)> {
    // Checked splits: a name is anyone's (a hub listing's), and an index
    // inside a multi-byte character must be a `None`, not a panic.
    let (stem, ext) = name.split_at_checked(name.len().checked_sub(5)?)?;
    if !ext.eq_ignore_ascii_case(".gguf") {
        return None;
    }
    // "-00001-of-00003" is 15 bytes.
    let (prefix, tail) = stem.split_at_checked(stem.len().checked_sub(15)?)?;
    if !tail.is_ascii() {
        return None;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names() {
        assert_eq!(split_name("m-Q4_K_M-00002-of-00003.gguf"), Some(("m-Q4_K_M", 2, 3, ".gguf")));
        assert_eq!(part_name("m-00001-of-00002.GGUF", 2).as_deref(), Some("m-00002-of-00002.GGUF"));
        for no in [
            "m.gguf",
            "m-00003-of-00002.gguf",
            "m-00000-of-00002.gguf",
            "-00001-of-00002.gguf",
            "m-0001x-of-00002.gguf",
        ] {
            assert_eq!(split_name(no), None, "{no}");
        }
        // Multi-byte characters where a byte index would fall inside one.
        for odd in ["xéééééééé.gguf", "éééé", "aé-00001-of-0000é.gguf", "x€€€€€€€€€€€€€€.gguf", "ab€.gguf"]
        {
            assert_eq!(split_name(odd), None, "{odd}");
        }
    }
}
