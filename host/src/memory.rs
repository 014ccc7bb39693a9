//! Memory bounds: the `--memory-limit` flag and the error a user sees when a
//! run does not fit.
//!
//! MLX's limit is advisory on some backends (the CPU allocator never refuses),
//! so the host also checks the active memory after each prefill chunk and
//! decode step and stops with the same clear error.

use anyhow::anyhow;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The user's limit in bytes (0: none).
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// Parses a byte count: `1073741824`, `512M`, `8G`, `1.5GB`, `16GiB`, `2T`
/// (K/M/G/T are powers of 1024).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("`{s}` is not a size (e.g. 8G, 512M, 1073741824)"))?;
    let mul: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("unknown size unit `{u}` in `{s}` (use K, M, G or T)")),
    };
    let bytes = (n * mul).round();
    if !(bytes >= 1.0 && bytes < usize::MAX as f64) {
        return Err(format!("`{s}` is not a usable memory size"));
    }
    Ok(bytes as usize)
}

/// Sets MLX's memory limit and the host-side check to `bytes`.
pub fn set_limit(bytes: usize) {
    mlx::memory::set_memory_limit(bytes);
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The limit set with [`set_limit`], if any.
pub fn limit() -> Option<usize> {
    Some(LIMIT.load(Ordering::Relaxed)).filter(|&l| l > 0)
}

/// `b` bytes in the largest binary unit that keeps the number ≥ 1.
fn human(b: usize) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut x, mut u) = (b as f64, 0);
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", units[u])
    }
}

/// The one-line error for a run that does not fit.
pub fn out_of_memory(detail: &str) -> anyhow::Error {
    anyhow!(
        "out of memory ({detail}): bound the KV cache with --max-kv-size N, quantize it with --kv-bits 8 (or 4), or raise --memory-limit"
    )
}

/// Errors when the active memory is above the user's limit.
pub fn check() -> anyhow::Result<()> {
    let Some(l) = limit() else { return Ok(()) };
    let active = mlx::memory::active();
    if active > l {
        return Err(out_of_memory(&format!("{} in use, --memory-limit is {}", human(active), human(l))));
    }
    Ok(())
}

/// Whether an error is MLX failing to allocate.
pub fn is_alloc_failure(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    ["unable to allocate", "failed to allocate", "out of memory", "bad_alloc", "cudaerrormemoryallocation"]
        .iter()
        .any(|p| m.contains(p))
}

/// Turns an MLX allocation failure into the clear error; other errors pass.
pub fn explain(e: anyhow::Error) -> anyhow::Error {
    let msg = format!("{e:#}");
    if is_alloc_failure(&msg) && !msg.contains("--max-kv-size") {
        let first = msg.lines().next().unwrap_or("").trim().to_string();
        return out_of_memory(&format!("MLX: {first}"));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("8G"), Ok(8 << 30));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("2 KB"), Ok(2048));
        assert!(parse_bytes("8X").is_err());
        assert!(parse_bytes("G").is_err());
        assert!(parse_bytes("0").is_err());
    }

    #[test]
    fn alloc_messages() {
        assert!(is_alloc_failure("[malloc] Unable to allocate 4096 bytes."));
        assert!(!is_alloc_failure("shape mismatch"));
        let e = explain(anyhow!("forward: [malloc] Unable to allocate 4096 bytes."));
        let m = e.to_string();
        assert!(m.contains("--max-kv-size") && m.contains("--memory-limit") && !m.contains('\n'), "{m}");
    }
}
