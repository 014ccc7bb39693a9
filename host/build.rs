//! The famlx binary and tests run without LD_LIBRARY_PATH: point their run
//! path at the libmlx mlx-sys linked (LD_LIBRARY_PATH still wins, which is how
//! the CUDA build is swapped in on GPU machines).
fn main() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
