//! Memory bounds: the `--memory-limit` flag and the error a user sees when a
//! run does not fit.
//!
//! MLX's limit is advisory on some backends (the CPU allocator never refuses),
//! so the host also checks the active memory after each prefill chunk and
//! decode step and stops with the same clear error.

use anyhow::anyhow;
use plugin_api::abi::PluginError;
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

/// The kind of failure `e` is, from the first MLX or plugin error in its
/// chain (`None`: an error of the host's own with no kind).
pub fn kind_of(e: &anyhow::Error) -> Option<mlx::ErrorKind> {
    e.chain().find_map(|c| {
        c.downcast_ref::<mlx::Error>()
            .map(|m| m.kind)
            .or_else(|| c.downcast_ref::<PluginError>().map(|p| p.kind.into()))
    })
}

/// An error with the text `text` and the kind of `cause` (for a message
/// that restates `cause` with where it happened in front).
pub fn with_kind_of(cause: &anyhow::Error, text: String) -> anyhow::Error {
    match kind_of(cause) {
        Some(kind) => anyhow::Error::new(mlx::Error::new(kind, text)),
        None => anyhow!(text),
    }
}

/// Turns an MLX allocation failure (of the host's or of a plugin) into the
/// clear error; other errors pass.
pub fn explain(e: anyhow::Error) -> anyhow::Error {
    if kind_of(&e) == Some(mlx::ErrorKind::AllocationFailure) {
        let msg = format!("{e:#}");
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
    fn alloc_failures_are_explained_by_kind() {
        let alloc = || mlx::Error::new(mlx::ErrorKind::AllocationFailure, "[malloc] Unable to allocate 4096 bytes.");
        for e in [
            anyhow::Error::new(alloc()).context("forward"),
            anyhow::Error::new(PluginError::from(alloc())),
            with_kind_of(&anyhow::Error::new(alloc()), "model: [malloc] Unable to allocate 4096 bytes.".into()),
        ] {
            let m = explain(e).to_string();
            assert!(m.contains("--max-kv-size") && m.contains("--memory-limit") && !m.contains('\n'), "{m}");
        }
        // The words alone are not the kind, and the clear error is not explained twice.
        let m = explain(anyhow!("shape mismatch")).to_string();
        assert_eq!(m, "shape mismatch");
        let oom = explain(out_of_memory("1 GB in use, --memory-limit is 1 GB")).to_string();
        assert_eq!(oom, out_of_memory("1 GB in use, --memory-limit is 1 GB").to_string());
    }
}
