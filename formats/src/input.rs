//! Files a user names as inputs (configs, tokenizers, templates, images,
//! audio, hostfiles, weights): only regular files are opened, and each is
//! read up to a size bound suited to its kind.
//!
//! A FIFO would block the reader forever and a device such as `/dev/zero`
//! never ends, so both are refused from their metadata, without reading a
//! byte. The bounds below are the one place famlx states how large each kind
//! of input may be; a file past its bound is refused before it is read, and
//! a file that grows (or a `/proc` file that reports size 0) is cut off one
//! byte past the bound and refused as well.
//!
//! Errors are [`std::io::Error`]s (a missing file keeps
//! [`std::io::ErrorKind::NotFound`]) with one-line messages that do not
//! repeat the path, for callers that already write `"{path}: cannot read:
//! {e}"`.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::Path;

const MIB: u64 = 1 << 20;

/// JSON side files of a checkpoint: config.json, tokenizer_config.json,
/// generation_config.json, processor configs, special_tokens_map.json,
/// added_tokens.json, chat_template.json, model.safetensors.index.json.
/// Real ones are kilobytes to a few megabytes.
pub const MAX_JSON: u64 = 64 * MIB;
/// `tokenizer.json` (the largest real ones are about 35 MB) and
/// `tokenizer.model`.
pub const MAX_TOKENIZER: u64 = 256 * MIB;
/// A chat template (`chat_template.jinja`); real ones are a few kilobytes.
pub const MAX_TEMPLATE: u64 = 4 * MIB;
/// An image file (the decoder bounds the pixels on its own).
pub const MAX_IMAGE: u64 = 256 * MIB;
/// A WAV file (the decoder bounds the duration on its own).
pub const MAX_AUDIO: u64 = 512 * MIB;
/// A small text file (a launch hostfile, a README copied by `convert`).
pub const MAX_TEXT: u64 = 16 * MIB;

/// What kind of file `m` describes, when it is not a regular file.
fn special_kind(m: &Metadata) -> Option<&'static str> {
    let t = m.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

fn refuse_special(m: &Metadata) -> io::Result<()> {
    match special_kind(m) {
        None => Ok(()),
        Some(kind) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind}, not a regular file (famlx reads only regular files)"),
        )),
    }
}

/// `size` says how large the file is ("1234 bytes", "more than 1234 bytes").
fn too_big(size: String, what: &str, max: u64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{size}, over the {} famlx reads for {what}", shown(max)))
}

/// `max` in MiB when it is a whole number of them, else in bytes.
fn shown(max: u64) -> String {
    if max >= MIB && max.is_multiple_of(MIB) {
        format!("{} MiB", max / MIB)
    } else {
        format!("{max} bytes")
    }
}

/// Opens `path` (symlinks followed) for reading if it is a regular file:
/// the file and its size. Anything else is refused from its metadata, before
/// it is opened; the open itself does not block (a FIFO swapped in between
/// is caught by the second check on the open handle).
pub fn open_input(path: &Path) -> io::Result<(File, u64)> {
    refuse_special(&std::fs::metadata(path)?)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking only matters for what is refused below; regular
        // files ignore it.
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let f = opts.open(path)?;
    let m = f.metadata()?;
    refuse_special(&m)?;
    Ok((f, m.len()))
}

/// The bytes of the regular file `path`, refused past `max` bytes; `what`
/// names the kind of file in that message ("a chat template").
pub fn read_input(path: &Path, what: &str, max: u64) -> io::Result<Vec<u8>> {
    let (f, size) = open_input(path)?;
    if size > max {
        return Err(too_big(format!("{size} bytes"), what, max));
    }
    let mut buf = Vec::with_capacity(size as usize);
    f.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(too_big(format!("more than {max} bytes"), what, max));
    }
    Ok(buf)
}

/// [`read_input`] for a text file: refused when it is not UTF-8.
pub fn read_input_text(path: &Path, what: &str, max: u64) -> io::Result<String> {
    String::from_utf8(read_input(path, what, max)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 text ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("famlx-input-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn regular_files_are_read_up_to_their_bound() {
        let d = scratch("bound");
        let p = d.join("a.json");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_input(&p, "a config", 10).unwrap(), b"0123456789");
        let e = read_input(&p, "a config", 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("10 bytes, over the 9 bytes famlx reads for a config"), "{e}");
        // Followed through a symlink.
        let l = d.join("link.json");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert_eq!(read_input_text(&l, "a config", 10).unwrap(), "0123456789");
        assert_eq!(read_input(&d.join("none"), "x", 10).unwrap_err().kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn devices_fifos_and_folders_are_refused_without_reading() {
        let d = scratch("special");
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(fifo.as_os_str())).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (p, says) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/zero"), "character device"),
            (Path::new("/dev/urandom"), "character device"),
            (d.as_path(), "directory"),
        ] {
            let e = read_input(p, "a config", MAX_JSON).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{}", p.display());
            assert!(e.to_string().contains(says), "{}: {e}", p.display());
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A /proc file says 0 bytes and has more: it is cut at the bound.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_longer_than_it_says_is_cut_at_the_bound() {
        let e = read_input(Path::new("/proc/self/maps"), "a config", 4).unwrap_err();
        assert!(e.to_string().contains("more than 4 bytes, over the 4 bytes"), "{e}");
    }
}
