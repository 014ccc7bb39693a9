//! Finds a prebuilt MLX (headers + `libmlx.so`), compiles the C++ shim against
//! it and links MLX dynamically.
//!
//! Search order: `MLX_DIR` (a folder with `include/` and `lib/libmlx.so`), the
//! `mlx` Python package of `python3`, else the pinned wheel fetched with
//! `python3 -m pip download` into the user cache.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The MLX version the shim is written against.
const MLX_VERSION: &str = "0.32.4";

fn main() {
    println!("cargo:rerun-if-env-changed=MLX_DIR");
    println!("cargo:rerun-if-changed=csrc/shim.cpp");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=build.rs");

    let dir = find_mlx().unwrap_or_else(|e| panic!("mlx-sys: cannot find MLX {MLX_VERSION}: {e}"));
    let include = dir.join("include");
    let lib = dir.join("lib");

    cc::Build::new()
        .cpp(true)
        .std("c++20")
        .file("csrc/shim.cpp")
        .file("csrc/cpu_qmm.cpp")
        .file("csrc/cpu_qmm_kernels.cpp")
        .file("csrc/cpu_norm.cpp")
        .file("csrc/cpu_pool.cpp")
        .file("csrc/cpu_attention.cpp")
        .file("csrc/cpu_matmul.cpp")
        .file("csrc/cpu_qmm_half.cpp")
        .file("csrc/cpu_activation.cpp")
        .include(&include)
        .include("csrc")
        .flag_if_supported("-Wno-deprecated-declarations")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-fvisibility=hidden")
        // The CPU primitives round each product and sum as MLX's separate
        // operations do (cpu_attention.cpp): no fused multiply-adds unless
        // written out.
        .flag_if_supported("-ffp-contract=off")
        // MLX's simd exp (used by cpu_attention.cpp) reinterprets an int
        // vector as floats through a pointer cast.
        .flag_if_supported("-fno-strict-aliasing")
        .opt_level(2)
        .compile("famlx_mlx_shim");

    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    if cfg!(target_os = "macos") {
        println!("cargo:rustc-link-lib=dylib=c++");
    } else {
        println!("cargo:rustc-link-lib=dylib=stdc++");
    }
    // Dependents read these as DEP_MLX_LIBDIR / DEP_MLX_VERSION to set their run path.
    println!("cargo:libdir={}", lib.display());
    println!("cargo:version={MLX_VERSION}");
    println!("cargo:rustc-env=FAMLX_MLX_LIBDIR={}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}

fn valid(dir: &Path) -> Result<(), String> {
    let version_h = dir.join("include/mlx/version.h");
    let text = std::fs::read_to_string(&version_h).map_err(|e| format!("{}: {e}", version_h.display()))?;
    let want: Vec<&str> = MLX_VERSION.split('.').collect();
    for (name, v) in ["MAJOR", "MINOR", "PATCH"].iter().zip(want) {
        let needle = format!("#define MLX_VERSION_{name} {v}");
        if !text.contains(&needle) {
            return Err(format!("{} is not MLX {MLX_VERSION}", version_h.display()));
        }
    }
    let so = if cfg!(target_os = "macos") { "libmlx.dylib" } else { "libmlx.so" };
    if !dir.join("lib").join(so).exists() {
        return Err(format!("{} has no lib/{so}", dir.display()));
    }
    Ok(())
}

fn find_mlx() -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    if let Ok(d) = env::var("MLX_DIR") {
        let d = PathBuf::from(d);
        match valid(&d) {
            Ok(()) => return Ok(d),
            Err(e) => tried.push(format!("MLX_DIR: {e}")),
        }
    }
    if let Some(d) = python_mlx() {
        match valid(&d) {
            Ok(()) => return Ok(d),
            Err(e) => tried.push(format!("python mlx: {e}")),
        }
    }
    match fetch_wheel() {
        Ok(d) => match valid(&d) {
            Ok(()) => Ok(d),
            Err(e) => {
                tried.push(format!("wheel: {e}"));
                Err(tried.join("; "))
            }
        },
        Err(e) => {
            tried.push(format!("wheel: {e}"));
            Err(tried.join("; "))
        }
    }
}

fn python() -> String {
    env::var("PYTHON3").unwrap_or_else(|_| "python3".into())
}

fn python_mlx() -> Option<PathBuf> {
    let out = Command::new(python())
        .args(["-c", "import mlx, os; print(os.path.dirname(mlx.__file__) if mlx.__file__ else list(mlx.__path__)[0])"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    Some(PathBuf::from(s.trim()))
}

fn cache_root() -> PathBuf {
    if let Ok(d) = env::var("XDG_CACHE_HOME") {
        return PathBuf::from(d);
    }
    let home = env::var("HOME").unwrap_or_else(|_| "/tmp".into());
    if cfg!(target_os = "macos") {
        PathBuf::from(home).join("Library/Caches")
    } else {
        PathBuf::from(home).join(".cache")
    }
}

/// Downloads the pinned MLX wheel with pip and unpacks it once into the cache.
fn fetch_wheel() -> Result<PathBuf, String> {
    let (pkg, tag) = if cfg!(target_os = "macos") { ("mlx-metal", "metal") } else { ("mlx-cpu", "cpu") };
    let root = cache_root().join("famlx").join(format!("mlx-{tag}-{MLX_VERSION}"));
    let mlx_dir = root.join("mlx");
    if valid(&mlx_dir).is_ok() {
        return Ok(mlx_dir);
    }
    let dl = root.join("download");
    std::fs::create_dir_all(&dl).map_err(|e| format!("{}: {e}", dl.display()))?;
    let st = Command::new(python())
        .args(["-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d"])
        .arg(&dl)
        .arg(format!("{pkg}=={MLX_VERSION}"))
        .status()
        .map_err(|e| format!("running pip: {e}"))?;
    if !st.success() {
        return Err(format!("pip download {pkg}=={MLX_VERSION} failed"));
    }
    let whl = std::fs::read_dir(&dl)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("pip left no wheel")?;
    let st = Command::new(python())
        .args(["-m", "zipfile", "-e"])
        .arg(&whl)
        .arg(&root)
        .status()
        .map_err(|e| format!("unzipping: {e}"))?;
    if !st.success() {
        return Err(format!("could not unpack {}", whl.display()));
    }
    Ok(mlx_dir)
}
