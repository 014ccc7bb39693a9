//! Helpers shared by the integration tests: the recorded MLX (Python)
//! expectations and tolerant comparisons.
#![allow(dead_code)]

use mlx::{Array, Dtype};
use std::collections::HashMap;
use std::path::PathBuf;

/// `mlx/tests/data/<name>`.
pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Arrays recorded by `make_expected.py` (inputs and outputs).
pub struct Expected(pub HashMap<String, Array>);

impl Expected {
    /// Loads `expected.safetensors`.
    pub fn load() -> Expected {
        let (m, _) = mlx::io::load_safetensors(&data("expected.safetensors")).expect("expected.safetensors");
        Expected(m)
    }

    /// The array recorded as `name`.
    pub fn get(&self, name: &str) -> Array {
        self.0.get(name).unwrap_or_else(|| panic!("no recorded array {name}")).clone()
    }
}

/// `expected.json`.
pub fn expected_json() -> serde_json::Value {
    let text = std::fs::read_to_string(data("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("json")
}

/// Asserts same shape and values within `atol + rtol * |want|` (as f32).
#[track_caller]
pub fn assert_close(what: &str, got: &Array, want: &Array, atol: f32, rtol: f32) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let g = got.to_vec::<f32>().unwrap_or_else(|e| panic!("{what}: {e}"));
    let w = want.to_vec::<f32>().unwrap();
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a - b).abs() <= atol + rtol * b.abs() || (a.is_nan() && b.is_nan()) || a == b;
        assert!(ok, "{what}: element {i}: got {a}, want {b} (got {:?}, want {:?})", &g, &w);
    }
}

/// Asserts same shape and exactly equal values (compared as i64).
#[track_caller]
pub fn assert_exact(what: &str, got: &Array, want: &Array) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let g = got.to_vec::<i64>().unwrap_or_else(|e| panic!("{what}: {e}"));
    let w = want.to_vec::<i64>().unwrap();
    assert_eq!(g, w, "{what}");
}

/// Checks `got` against the recorded `name` with a default f32 tolerance.
#[track_caller]
pub fn check(e: &Expected, name: &str, got: &Array) {
    assert_close(name, got, &e.get(name), 1e-5, 1e-5);
}

/// Checks `got` against the recorded `name` within `tol` (absolute and relative).
#[track_caller]
pub fn check_tol(e: &Expected, name: &str, got: &Array, tol: f32) {
    assert_close(name, got, &e.get(name), tol, tol);
}

/// An f32 array from values.
pub fn f32s(v: &[f32], shape: &[i32]) -> Array {
    Array::from_slice(v, shape).unwrap()
}

/// An i32 array from values.
pub fn i32s(v: &[i32], shape: &[i32]) -> Array {
    Array::from_slice(v, shape).unwrap()
}

/// Ones of a shape (f32).
pub fn ones(shape: &[i32]) -> Array {
    mlx::ones(shape, Dtype::F32).unwrap()
}

/// Whether the default device is the CPU (famlx's CPU primitives apply).
pub fn on_cpu() -> bool {
    mlx::device::default_device().unwrap().0 == mlx::device::DeviceType::Cpu
}

/// Whether famlx's AVX-512 kernels can run here (F, BW, VL and DQ).
pub fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return ["avx512f", "avx512bw", "avx512vl", "avx512dq"].iter().all(|f| match *f {
        "avx512f" => is_x86_feature_detected!("avx512f"),
        "avx512bw" => is_x86_feature_detected!("avx512bw"),
        "avx512vl" => is_x86_feature_detected!("avx512vl"),
        _ => is_x86_feature_detected!("avx512dq"),
    });
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Evaluates `f` with famlx's CPU primitive on, then off (`var` = `mlx`,
/// read per call): asserts the census shows `primitive` exactly when
/// `expect_ours` (and never with the switch off), and that both results
/// have the same dtype, shape and bits.
pub fn same_bits_as_mlx(var: &str, primitive: &str, expect_ours: bool, what: &str, f: impl Fn() -> Array) {
    let uses = |a: &Array| mlx::graph_census(&[a]).unwrap().iter().any(|(n, _)| n == primitive);
    std::env::remove_var(var);
    let ours = f();
    assert_eq!(uses(&ours), expect_ours, "{what}: {:?}", mlx::graph_census(&[&ours]).unwrap());
    std::env::set_var(var, "mlx");
    let theirs = f();
    std::env::remove_var(var);
    assert!(!uses(&theirs), "{what}: {var}=mlx still used {primitive}");
    assert_eq!(ours.shape(), theirs.shape(), "{what}");
    assert_eq!(ours.dtype(), theirs.dtype(), "{what}");
    let f32s = |a: &Array| a.astype(Dtype::F32).unwrap().to_vec::<f32>().unwrap();
    let (a, b) = (f32s(&ours), f32s(&theirs));
    let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    assert_eq!(differ, 0, "{what}: {differ} of {} values differ from MLX's", a.len());
}
