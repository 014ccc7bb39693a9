//! The famlx binary and tests run without LD_LIBRARY_PATH: point their run
//! path at the libmlx mlx-sys linked (LD_LIBRARY_PATH still wins, which is how
//! the CUDA build is swapped in on GPU machines).
//!
//! `famlx plugin new` embeds the SDK crates' sources (src/scaffold.rs), which
//! rustc does not track on stable: rebuild when they change.
fn main() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    for dir in ["../plugin-api", "../mlx", "../mlx-sys", "build.rs"] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
