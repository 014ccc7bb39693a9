//! This crate's unit tests run without LD_LIBRARY_PATH: point their run path
//! at the libmlx that mlx-sys linked.
fn main() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
