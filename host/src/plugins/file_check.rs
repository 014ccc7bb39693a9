//! What a plugin file must be before the dynamic loader sees it.
//!
//! `dlopen` trusts the file: a FIFO blocks it forever, a truncated library
//! maps pages past the end of the file (SIGBUS on first touch), a library of
//! another architecture is reported as a missing file, and a version stamp
//! that is data, not code, crashes the host when it is called. So each file
//! is checked first, reading only its headers and dynamic symbol table:
//! a regular file (by `stat`, so a FIFO is never opened), a shared library
//! in this platform's format, built for this machine, whose program headers
//! all lie within the file, with the famlx stamps as functions in its code.

use anyhow::{anyhow, bail, Result};
use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::{Architecture, FileKind, Object, ObjectKind, ObjectSegment, ObjectSymbol, ReadCache, ReadRef};
use plugin_api::{ABI_VERSION_SYMBOL, MLX_VERSION_SYMBOL};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Checks that `path` can be handed to the dynamic loader. The error says
/// what is wrong, without the path (the caller puts it first).
pub fn check_library(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| anyhow!("cannot read: {e}"))?;
    if !meta.is_file() {
        bail!("not a regular file ({})", file_type(&meta.file_type()));
    }
    // Non-blocking, so a file swapped for a FIFO since the stat cannot hang
    // the open either; it is then refused by the same check on the handle.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| anyhow!("cannot read: {e}"))?;
    let meta = file.metadata().map_err(|e| anyhow!("cannot read: {e}"))?;
    if !meta.is_file() {
        bail!("not a regular file ({})", file_type(&meta.file_type()));
    }
    if cfg!(windows) {
        // PE files are left to the loader.
        return Ok(());
    }
    let cache = ReadCache::new(file);
    let len = meta.len();
    let kind = FileKind::parse(&cache).map_err(|_| not_a_library(None))?;
    match kind {
        FileKind::Elf32 | FileKind::Elf64 if !cfg!(target_os = "macos") => check_object(&cache, len),
        FileKind::MachO32 | FileKind::MachO64 if cfg!(target_os = "macos") => check_object(&cache, len),
        FileKind::MachOFat32 | FileKind::MachOFat64 if cfg!(target_os = "macos") => check_fat(&cache, kind, len),
        other => Err(not_a_library(Some(other))),
    }
}

/// How a file type is named in an error.
fn file_type(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

/// The refusal of a file that is not a library of this platform's format
/// (`kind`: the format it is, when known).
fn not_a_library(kind: Option<FileKind>) -> anyhow::Error {
    let want = if cfg!(target_os = "macos") { "Mach-O" } else { "ELF" };
    match kind {
        Some(FileKind::Elf32 | FileKind::Elf64) => anyhow!("an ELF file (a Linux library); this famlx needs {want}"),
        Some(FileKind::MachO32 | FileKind::MachO64 | FileKind::MachOFat32 | FileKind::MachOFat64) => {
            anyhow!("a Mach-O file (a macOS library); this famlx needs {want}")
        }
        _ => anyhow!("not a shared library (no {want} header)"),
    }
}

/// Checks one library image (a whole file, or one slice of a universal
/// Mach-O file) of `len` bytes.
fn check_object<'a, R: ReadRef<'a>>(data: R, len: u64) -> Result<()> {
    let obj = object::File::parse(data).map_err(|e| damaged(e, len))?;
    let theirs = arch_name(obj.architecture());
    let bits = |is_64: bool| if is_64 { 64 } else { 32 };
    let ours_64 = cfg!(target_pointer_width = "64");
    if theirs != std::env::consts::ARCH || obj.is_64() != ours_64 {
        let theirs = match &obj {
            object::File::Elf32(f) => elf_machine(f, &theirs),
            object::File::Elf64(f) => elf_machine(f, &theirs),
            _ => theirs,
        };
        let ours = std::env::consts::ARCH;
        if obj.is_64() == ours_64 {
            bail!("built for {theirs}, this famlx runs on {ours}");
        }
        bail!("built for {theirs} ({}-bit), this famlx runs on {ours} ({}-bit)", bits(obj.is_64()), bits(ours_64));
    }
    if obj.is_little_endian() != cfg!(target_endian = "little") {
        bail!("built for a {theirs} of the other byte order");
    }
    if obj.kind() != ObjectKind::Dynamic {
        bail!("not a shared library (an {} file)", format!("{:?}", obj.kind()).to_lowercase());
    }
    let ranges = match &obj {
        object::File::Elf32(f) => program_headers(f),
        object::File::Elf64(f) => program_headers(f),
        other => other.segments().map(|s| s.file_range()).collect(),
    };
    for (offset, size) in ranges {
        let end = offset.checked_add(size).filter(|&e| e <= len);
        if end.is_none() {
            bail!("truncated: a segment needs bytes {offset}..{} but the file has {len}", offset.saturating_add(size));
        }
    }
    check_stamps(&obj)
}

/// The refusal of a library `object` cannot read (`len`: its size).
fn damaged(e: object::Error, len: u64) -> anyhow::Error {
    anyhow!("truncated or damaged library (the file has {len} bytes; {e})")
}

/// The `(offset, size)` in the file of every ELF program header.
fn program_headers<'a, E: FileHeader, R: ReadRef<'a>>(f: &ElfFile<'a, E, R>) -> Vec<(u64, u64)> {
    let endian = f.endian();
    f.elf_program_headers().iter().map(|p| (p.p_offset(endian).into(), p.p_filesz(endian).into())).collect()
}

/// `name`, or the ELF machine number when `object` has no name for it.
fn elf_machine<'a, E: FileHeader, R: ReadRef<'a>>(f: &ElfFile<'a, E, R>, name: &str) -> String {
    if name == "unknown" {
        format!("ELF machine {}", f.elf_header().e_machine(f.endian()))
    } else {
        name.to_string()
    }
}

/// The slice of a universal Mach-O file that is for this machine, checked.
fn check_fat<'a, R: ReadRef<'a>>(data: R, kind: FileKind, len: u64) -> Result<()> {
    use object::read::macho::{FatArch, MachOFatFile32, MachOFatFile64};
    let damaged = |e| damaged(e, len);
    let arches: Vec<(Architecture, u64, u64)> = if kind == FileKind::MachOFat32 {
        let f = MachOFatFile32::parse(data).map_err(damaged)?;
        f.arches().iter().map(|a| (a.architecture(), a.offset().into(), a.size().into())).collect()
    } else {
        let f = MachOFatFile64::parse(data).map_err(damaged)?;
        f.arches().iter().map(|a| (a.architecture(), a.offset(), a.size())).collect()
    };
    let Some(&(_, offset, size)) = arches.iter().find(|a| arch_name(a.0) == std::env::consts::ARCH) else {
        let names: Vec<String> = arches.iter().map(|a| arch_name(a.0)).collect();
        bail!("built for {}, this famlx runs on {}", names.join(", "), std::env::consts::ARCH);
    };
    if offset.checked_add(size).is_none_or(|e| e > len) {
        bail!("truncated: the {} slice needs bytes {offset}..{} but the file has {len}", std::env::consts::ARCH, {
            offset.saturating_add(size)
        });
    }
    let slice =
        data.read_bytes_at(offset, size).map_err(|()| anyhow!("cannot read the {} slice", std::env::consts::ARCH))?;
    check_object(slice, size)
}

/// An architecture named as Rust's `std::env::consts::ARCH` names it.
fn arch_name(a: Architecture) -> String {
    match a {
        Architecture::X86_64 => "x86_64",
        Architecture::X86_64_X32 => "x86_64 (x32)",
        Architecture::I386 => "x86",
        Architecture::Aarch64 => "aarch64",
        Architecture::Aarch64_Ilp32 => "aarch64 (ilp32)",
        Architecture::Arm => "arm",
        Architecture::Riscv32 => "riscv32",
        Architecture::Riscv64 => "riscv64",
        Architecture::PowerPc => "powerpc",
        Architecture::PowerPc64 => "powerpc64",
        Architecture::S390x => "s390x",
        Architecture::Mips => "mips",
        Architecture::Mips64 => "mips64",
        Architecture::LoongArch64 => "loongarch64",
        Architecture::Sparc64 => "sparc64",
        Architecture::Unknown => "unknown",
        other => return format!("{other:?}").to_lowercase(),
    }
    .to_string()
}

/// The ABI stamp must be a function in the library's code; so must the MLX
/// stamp where there is one (its absence is reported after the ABI
/// version is compared, see `check_stamps` in the parent module).
fn check_stamps<'a, R: ReadRef<'a>>(obj: &object::File<'a, R>) -> Result<()> {
    let name = |s: &[u8]| String::from_utf8_lossy(s.strip_suffix(b"\0").unwrap_or(s)).into_owned();
    if !stamp(obj, ABI_VERSION_SYMBOL)? {
        bail!("not a famlx plugin (no {} symbol)", name(ABI_VERSION_SYMBOL));
    }
    stamp(obj, MLX_VERSION_SYMBOL)?;
    Ok(())
}

/// Finds the exported symbol `wanted` (NUL-terminated, as libloading takes
/// it): whether it is there; an error when it is there but not a function
/// of the library's code (calling it would crash the host).
fn stamp<'a, R: ReadRef<'a>>(obj: &object::File<'a, R>, wanted: &[u8]) -> Result<bool> {
    let wanted = wanted.strip_suffix(b"\0").unwrap_or(wanted);
    let shown = String::from_utf8_lossy(wanted);
    let is_elf = matches!(obj, object::File::Elf32(_) | object::File::Elf64(_));
    // Mach-O symbol names carry a leading underscore.
    let matches = |n: &[u8]| n == wanted || (!is_elf && n.strip_prefix(b"_") == Some(wanted));
    let found = if is_elf {
        obj.dynamic_symbols().find(|s| s.is_definition() && s.name_bytes().is_ok_and(matches))
    } else {
        obj.symbols().find(|s| s.is_definition() && s.name_bytes().is_ok_and(matches))
    };
    let Some(sym) = found else { return Ok(false) };
    if sym.kind() != object::SymbolKind::Text {
        let what = match sym.kind() {
            object::SymbolKind::Data => "a data symbol".to_string(),
            object::SymbolKind::Tls => "a thread-local symbol".to_string(),
            k => format!("a symbol of kind {k:?}"),
        };
        bail!("not a famlx plugin ({shown} is {what}, not a function)");
    }
    if is_elf && sym.size() == 0 {
        bail!("not a famlx plugin ({shown} is a function of size 0)");
    }
    let (start, end) = (sym.address(), sym.address().saturating_add(sym.size().max(1)));
    let in_code = obj.segments().any(|seg| {
        seg.permissions().executable() && seg.address() <= start && end <= seg.address().saturating_add(seg.size())
    });
    if !in_code {
        bail!("not a famlx plugin ({shown} lies outside the library's code)");
    }
    Ok(true)
}
