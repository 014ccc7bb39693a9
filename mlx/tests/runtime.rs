//! io (safetensors, GGUF), evaluation, compile, devices and streams, memory
//! and custom kernels.
//!
//! The memory counters are process-wide, so the tests in this file take one
//! lock and run one at a time.

mod common;

use common::*;
use mlx::compile::Compiled;
use mlx::device::{self, Backend, DeviceType};
use mlx::io::{self, GgufValue};
use mlx::kernel::{Kernel, KernelSource, Launch};
use mlx::{memory, Array, Dtype};
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("famlx-mlx-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn safetensors_roundtrip_with_metadata() {
    let _g = serial();
    // Written by Python, read here (with its metadata).
    let (arrays, meta) = io::load_safetensors(&data("expected.safetensors")).unwrap();
    assert!(arrays.len() > 100);
    assert_eq!(meta.get("generator").map(String::as_str), Some("make_expected.py"));
    assert_eq!(meta.get("mlx").map(String::as_str), Some("0.32.4"));

    // Written and read back here, in several dtypes.
    let a = f32s(&[1.0, -2.5, 3.25, 4.0, 5.0, 6.0], &[2, 3]);
    let b = a.astype(Dtype::BF16).unwrap();
    let c = Array::from_slice(&[7i32, -8], &[2]).unwrap();
    let d = a.gt(&Array::f32(0.0)).unwrap();
    let p = tmp("rt.safetensors");
    io::save_safetensors(
        &p,
        &[("w.f32", &a), ("w.bf16", &b), ("ids", &c), ("mask", &d)],
        &[("format", "mlx"), ("note", "famlx test ✓")],
    )
    .unwrap();
    let (m, meta) = io::load_safetensors(&p).unwrap();
    assert_eq!(m.len(), 4);
    assert_eq!(meta["format"], "mlx");
    assert_eq!(meta["note"], "famlx test ✓");
    assert_close("f32", &m["w.f32"], &a, 0.0, 0.0);
    assert_eq!(m["w.bf16"].dtype(), Dtype::BF16);
    assert_close("bf16", &m["w.bf16"], &b, 0.0, 0.0);
    assert_eq!(m["ids"].to_vec::<i32>().unwrap(), vec![7, -8]);
    assert_eq!(m["mask"].dtype(), Dtype::Bool);
    assert_eq!(m["mask"].to_vec::<bool>().unwrap(), vec![true, false, true, true, true, true]);
    // Errors name the file.
    let missing = tmp("missing.safetensors");
    let e = io::load_safetensors(&missing).unwrap_err();
    assert!(e.msg.contains("missing.safetensors"), "{}", e.msg);
    let _ = std::fs::remove_file(&p);
}

#[test]
fn gguf_with_metadata() {
    let _g = serial();
    // small.gguf is written by make_expected.py with mx.save_gguf.
    let (arrays, meta) = io::load_gguf(&data("small.gguf")).unwrap();
    let emb = &arrays["tok_embd.weight"];
    assert_eq!(emb.shape(), &[3, 4]);
    assert_eq!(emb.to_vec::<f32>().unwrap(), (0..12).map(|i| i as f32).collect::<Vec<_>>());
    let norm = &arrays["blk.0.attn_norm.weight"];
    assert_eq!(norm.dtype(), Dtype::F16);
    assert_eq!(norm.to_vec::<f32>().unwrap(), vec![0.5, 1.5, -2.0, 4.0]);
    assert_eq!(arrays["pos"].to_vec::<i32>().unwrap(), vec![1, -2, 3]);

    match &meta["general.architecture"] {
        GgufValue::Str(s) => assert_eq!(s, "llama"),
        v => panic!("architecture: {v:?}"),
    }
    match &meta["general.name"] {
        GgufValue::Str(s) => assert_eq!(s, "famlx-test"),
        v => panic!("name: {v:?}"),
    }
    match &meta["llama.block_count"] {
        GgufValue::Array(a) => {
            assert_eq!(a.dtype(), Dtype::U32);
            assert_eq!(a.item_i64().unwrap(), 2);
        }
        v => panic!("block_count: {v:?}"),
    }
    match &meta["llama.rope.freq_base"] {
        GgufValue::Array(a) => assert_eq!(a.item_f32().unwrap(), 10000.0),
        v => panic!("freq_base: {v:?}"),
    }
    match &meta["tokenizer.ggml.scores"] {
        GgufValue::Array(a) => assert_eq!(a.to_vec::<f32>().unwrap(), vec![0.0, -1.0, -2.5]),
        v => panic!("scores: {v:?}"),
    }
    match &meta["tokenizer.ggml.tokens"] {
        GgufValue::Strs(v) => assert_eq!(v, &["<s>", "hello", "world"]),
        v => panic!("tokens: {v:?}"),
    }
    assert!(io::load_gguf(&tmp("nope.gguf")).is_err());
}

#[test]
fn eval_async_eval_synchronize() {
    let _g = serial();
    let a = mlx::arange(0.0, 100.0, 1.0, Dtype::F32).unwrap();
    let b = a.mul_s(2.0).unwrap().sum_all().unwrap();
    let c = a.square().unwrap().mean_all().unwrap();
    mlx::async_eval(&[&b, &c]).unwrap();
    mlx::synchronize().unwrap();
    assert_eq!(b.item_f32().unwrap(), 9900.0);
    assert_eq!(c.item_f32().unwrap(), 3283.5);
    mlx::eval(&[&b, &c]).unwrap();
    b.eval().unwrap();
    // Graph identity: clones share the node.
    assert_eq!(b.clone().id(), b.id());
    assert_ne!(b.id(), c.id());
    // Raw handles round-trip (used across the plugin boundary).
    let raw = b.clone().into_raw();
    let back = unsafe { Array::from_raw(raw) };
    assert_eq!(back.item_f32().unwrap(), 9900.0);
    mlx::eval(&[]).unwrap();
}

#[test]
fn compile() {
    let _g = serial();
    let f = Compiled::new(|xs| Ok(vec![xs[0].mul(&xs[1])?.add_s(1.0)?, xs[0].exp()?]), false).unwrap();
    let x = f32s(&[1.0, 2.0, 3.0], &[3]);
    let y = f32s(&[4.0, 5.0, 6.0], &[3]);
    let out = f.call(&[&x, &y]).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![5.0, 11.0, 19.0]);
    assert_close("exp", &out[1], &x.exp().unwrap(), 1e-6, 1e-6);
    // Replayed with new values; retraced for a new shape.
    let out = f.call(&[&y, &y]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![17.0, 26.0, 37.0]);
    let z = f32s(&[2.0, 2.0], &[2]);
    assert_eq!(f.call(&[&z, &z]).unwrap()[0].to_vec::<f32>().unwrap(), vec![5.0, 5.0]);

    // Shapeless: one trace for all shapes.
    let g = Compiled::new(|xs| Ok(vec![xs[0].sigmoid()?.mul(&xs[0])?]), true).unwrap();
    for n in [3, 7, 1] {
        let v = mlx::arange(0.0, n as f64, 1.0, Dtype::F32).unwrap();
        let want = v.mul(&v.sigmoid().unwrap()).unwrap();
        assert_close("shapeless", &g.call(&[&v]).unwrap()[0], &want, 1e-6, 1e-6);
    }

    // An error inside the traced function comes back as Err.
    let bad = Compiled::new(|xs| Ok(vec![xs[0].matmul(&xs[0])?]), false).unwrap();
    let e = bad.call(&[&ones(&[2, 3])]).unwrap_err();
    assert!(e.msg.contains("matmul"), "{}", e.msg);
    // So does a panic.
    let boom = Compiled::new(|_| panic!("boom"), false).unwrap();
    let e = boom.call(&[&x]).unwrap_err();
    assert!(e.msg.contains("panic"), "{}", e.msg);

    // Several compiled functions live side by side and can be dropped.
    let h = Compiled::new(|xs| Ok(vec![xs[0].add_s(10.0)?]), false).unwrap();
    drop(f);
    assert_eq!(h.call(&[&x]).unwrap()[0].to_vec::<f32>().unwrap(), vec![11.0, 12.0, 13.0]);
    // Disabled: runs eagerly, same results.
    mlx::compile::set_enabled(false).unwrap();
    let k = Compiled::new(|xs| Ok(vec![xs[0].add_s(1.0)?]), false).unwrap();
    let r = k.call(&[&x]).unwrap();
    mlx::compile::set_enabled(true).unwrap();
    assert_eq!(r[0].to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
}

#[test]
fn devices_and_streams() {
    let _g = serial();
    let backend = device::backend();
    let (dt, idx) = device::default_device().unwrap();
    assert_eq!(idx, 0);
    assert!(device::is_available(DeviceType::Cpu));
    match backend {
        Backend::Cpu => {
            assert_eq!(dt, DeviceType::Cpu);
            assert!(!device::is_available(DeviceType::Gpu));
        }
        _ => assert_eq!(dt, DeviceType::Gpu),
    }
    assert!(["cpu", "metal", "cuda"].contains(&backend.to_string().as_str()));

    // A new stream, made the default on this thread, runs work; then restore.
    let old = device::default_stream(DeviceType::Cpu).unwrap();
    let s = device::new_stream(DeviceType::Cpu).unwrap();
    assert_ne!(s, old);
    device::set_default_stream(DeviceType::Cpu, s).unwrap();
    assert_eq!(device::default_stream(DeviceType::Cpu).unwrap(), s);
    device::set_default_device(DeviceType::Cpu, 0).unwrap();
    let v = f32s(&[1.0, 2.0], &[2]).add_s(1.0).unwrap();
    mlx::async_eval(&[&v]).unwrap();
    device::synchronize_stream(DeviceType::Cpu, s).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
    device::set_default_stream(DeviceType::Cpu, old).unwrap();
    device::set_default_device(dt, idx).unwrap();
    assert_eq!(device::default_device().unwrap(), (dt, idx));
    if backend == Backend::Cpu {
        assert!(device::set_default_device(DeviceType::Gpu, 0).is_err() || !device::is_available(DeviceType::Gpu));
        device::set_default_device(dt, idx).unwrap();
    }
}

#[test]
fn memory_counters_and_limits() {
    let _g = serial();
    memory::clear_cache();
    memory::reset_peak();
    let before = memory::active();
    let mb = 1 << 20;
    {
        let a = mlx::ones(&[1024, 1024], Dtype::F32).unwrap().add_s(1.0).unwrap();
        a.eval().unwrap();
        assert!(memory::active() >= before + 4 * mb - 4096, "active {}", memory::active());
        assert!(memory::peak() >= 4 * mb);
    }
    // Freed buffers go to the cache (unless the limit is 0), and clear_cache empties it.
    assert!(memory::cache() >= 4 * mb, "cache {}", memory::cache());
    memory::clear_cache();
    assert_eq!(memory::cache(), 0);
    assert!(memory::peak() >= 4 * mb);
    memory::reset_peak();
    assert!(memory::peak() < 4 * mb);

    // Cache limit 0: freed buffers are released at once.
    let old_cache = memory::set_cache_limit(0);
    {
        let a = mlx::ones(&[512, 512], Dtype::F32).unwrap().add_s(1.0).unwrap();
        a.eval().unwrap();
    }
    assert_eq!(memory::cache(), 0);
    assert_eq!(memory::set_cache_limit(old_cache), 0);

    let old = memory::memory_limit();
    assert!(old > 0);
    let prev = memory::set_memory_limit(old / 2);
    assert_eq!(prev, old);
    assert_eq!(memory::memory_limit(), old / 2);
    memory::set_memory_limit(old);
    assert_eq!(memory::memory_limit(), old);
    let _ = memory::set_wired_limit(0);
}

fn add_one_kernel() -> KernelSource {
    KernelSource {
        metal: Some("uint i = thread_position_in_grid.x; y[i] = x[i] + 1;".into()),
        cuda: Some("auto i = cg::this_grid().thread_rank(); if (i < N) { y[i] = x[i] + 1; }".into()),
        header: String::new(),
    }
}

/// On CPU-only MLX the kernel API returns a clear error; on a GPU backend
/// the kernel runs.
#[test]
fn custom_kernels() {
    let _g = serial();
    let src = add_one_kernel();
    let k = Kernel::new("add_one", &["x"], &["y"], &src, 0);
    if device::backend() == Backend::Cpu {
        assert!(!Kernel::available(&src));
        let e = k.err().expect("custom kernels need a GPU");
        assert!(e.msg.contains("CPU-only") && e.msg.contains("add_one"), "{}", e.msg);
        return;
    }
    let k = k.unwrap();
    let x = f32s(&[1.0, 2.0, 3.0], &[3]);
    let out = k
        .call(&Launch {
            inputs: &[&x],
            outputs: &[(&[3], Dtype::F32)],
            grid: [3, 1, 1],
            block: [32, 1, 1],
            template: &[("N", mlx::kernel::TemplateArg::Int(3))],
            init_value: None,
        })
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
}

#[test]
fn runtime_version() {
    mlx::check_runtime().unwrap();
    assert!(mlx::runtime_version().starts_with("0.32.4"));
    assert_eq!(mlx::build_version(), "0.32.4");
    assert!(std::path::Path::new(mlx::build_libdir()).exists());
}

#[test]
fn graph_census_counts_every_unevaluated_node_once() {
    let a = mlx::ones(&[2, 3], mlx::Dtype::F32).unwrap();
    let w = mlx::ones(&[3, 3], mlx::Dtype::F32).unwrap();
    mlx::eval(&[&a, &w]).unwrap();
    // Three matmuls of a 3-D input (each flattened and unflattened by MLX),
    // a shared subexpression used twice, and a two-output split.
    let mut x = a.reshape(&[1, 2, 3]).unwrap();
    for _ in 0..3 {
        x = x.matmul(&w).unwrap();
    }
    let s = x.add(&x).unwrap();
    let parts = s.split_at(&[1], 1).unwrap();
    let y = parts[0].add(&parts[1]).unwrap();
    // A compiled function called twice is two nodes (its calls share one primitive).
    let f = Compiled::new(|v: &[mlx::Array]| Ok(vec![v[0].exp()?.mul(&v[0])?]), true).unwrap();
    let y = f.call(&[&f.call(&[&y]).unwrap()[0]]).unwrap().remove(0);
    let c: std::collections::HashMap<String, usize> = mlx::graph_census(&[&y]).unwrap().into_iter().collect();
    assert_eq!(c.get("Matmul"), Some(&3), "{c:?}");
    assert_eq!(c.get("Flatten"), Some(&3), "{c:?}");
    assert_eq!(c.get("Add"), Some(&2), "{c:?}");
    assert_eq!(c.get("Split"), Some(&1), "{c:?}");
    assert_eq!(c.get("Reshape"), Some(&1), "{c:?}");
    assert_eq!(c.iter().filter(|(k, _)| k.starts_with("Compiled")).map(|(_, n)| n).sum::<usize>(), 2, "{c:?}");
    // Evaluated arrays are not part of the graph.
    mlx::eval(&[&y]).unwrap();
    assert!(mlx::graph_census(&[&y]).unwrap().is_empty());
}
