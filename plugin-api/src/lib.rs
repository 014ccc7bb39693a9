//! The famlx plugin SDK and the stable ABI between the host and
//! model-family plugins.
//!
//! Family authors implement the plain-Rust traits [`Family`] (its config a
//! [`FamilyConfig`], parsed once per plan), [`Model`] and, for speculative
//! decoding, [`Drafter`], then [`export_plugin!`]; [`adapter`] wraps them in
//! the stable traits of the same names under [`abi`] and catches panics.
//!
//! A plugin is a `cdylib` exporting an [`abi::PluginRef`] root module that
//! lists [`abi::FamilyBox`]es. Each family parses configs into a
//! [`ModelPlan`], rewrites checkpoint tensors, and builds an
//! [`abi::ModelBox`] whose `forward` runs against host-owned caches
//! ([`abi::CacheBox`]). Arrays cross the boundary as [`abi::ArrayHandle`]s:
//! owned pointers to the one MLX both sides link dynamically.

#![allow(non_local_definitions)] // abi_stable's sabi_trait expands to such impls

pub mod abi;
pub mod adapter;
pub mod config;
mod error;
pub mod family;
pub mod gguf;
mod handle;
pub mod layers;
pub mod media;
mod types;

pub use abi_stable;
pub use family::{Caches, Drafter, Family, FamilyConfig, Input, Model, Output, Position};
pub use media::{MediaSpec, Placeholders, Positions, ProcessedMedia, RawAudio, RawImage};
/// The MLX API, so out-of-tree plugins need no other famlx crate.
pub use mlx;
pub use serde;
pub use serde_json;
pub use types::{
    AttnMask, AttnOptions, CacheKind, DraftRole, Fusion, LogitsWanted, ModelInfo, ModelPlan, ParallelSpec, QuantClass,
    QuantSpec, TokenSource,
};
// The crate-internal path of the array handle (public under `abi`).
use handle::ArrayHandle;

use abi_stable::std_types::RVec;

/// Version of this ABI: the minor version of this crate (0.x), so a plugin
/// pins its ABI by pinning the SDK it builds against. Bumped, with the
/// crate's minor version, on any change to the types or traits that cross
/// the boundary; the host refuses plugins with another value. See
/// CHANGELOG.md.
pub const ABI_VERSION: u32 = parse_u32(env!("CARGO_PKG_VERSION_MINOR"));

/// The version of this crate (the SDK) a plugin was built against.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A decimal number in a const context (Cargo hands the version parts over
/// as strings; `str::parse` is not const).
const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0u32;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "version part is not a number");
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

/// Symbol every plugin exports with its [`ABI_VERSION`] (read before the
/// root module, so a mismatch is reported with both numbers).
pub const ABI_VERSION_SYMBOL: &[u8] = b"famlx_plugin_abi_version\0";
/// Symbol every plugin exports with the MLX version it was built against.
pub const MLX_VERSION_SYMBOL: &[u8] = b"famlx_plugin_mlx_version\0";
