//! Array ops against values recorded from MLX's Python API
//! (`tests/data/make_expected.py`) or computed by hand.

mod common;

use common::*;
use mlx::{Array, Dtype, FftKind, ScatterOp};

#[test]
fn creation() {
    let e = Expected::load();
    check(&e, "create.arange", &mlx::arange(2.0, 11.0, 1.5, Dtype::F32).unwrap());
    check(&e, "create.linspace", &mlx::linspace(-1.0, 1.0, 7, Dtype::F32).unwrap());
    check(&e, "create.eye", &mlx::eye(3, 4, 1, Dtype::F32).unwrap());
    check(&e, "create.tri", &mlx::tri(3, 4, 0, Dtype::F32).unwrap());
    let row = f32s(&[1.0, 2.0, 3.0], &[3]);
    check(&e, "create.full", &mlx::full(&[2, 3], &row, Dtype::F32).unwrap());

    let z = mlx::zeros(&[2, 3], Dtype::BF16).unwrap();
    assert_eq!((z.shape(), z.dtype()), (&[2, 3][..], Dtype::BF16));
    assert_eq!(z.sum_all().unwrap().item_f32().unwrap(), 0.0);
    let o = mlx::ones(&[4], Dtype::I32).unwrap();
    assert_eq!(o.to_vec::<i32>().unwrap(), vec![1; 4]);
    // Scalars take the requested dtype directly.
    let s = Array::scalar_f(2.5, Dtype::BF16).unwrap();
    assert_eq!((s.dtype(), s.ndim(), s.item_f32().unwrap()), (Dtype::BF16, 0, 2.5));
    assert_eq!(Array::scalar_i(-7, Dtype::I64).unwrap().item_i64().unwrap(), -7);
    assert_eq!(Array::scalar_f(3.0, Dtype::F64).unwrap().dtype(), Dtype::F64);
    // Host data round trip in several dtypes.
    let h = [half::bf16::from_f32(1.5), half::bf16::from_f32(-2.0)];
    let a = Array::from_slice(&h, &[2]).unwrap();
    assert_eq!(a.dtype(), Dtype::BF16);
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
    let u = Array::from_slice(&[1u8, 255], &[1, 2]).unwrap();
    assert_eq!(u.to_vec::<u8>().unwrap(), vec![1, 255]);
    assert_eq!(u.nbytes(), 2);
    assert_eq!(u.size(), 2);
    assert_eq!(u.dim(-1), 2);
}

#[test]
fn slicing() {
    let e = Expected::load();
    let x = e.get("idx.x");
    check(&e, "idx.slice_strided", &x.slice(&[0, 1, 0], &[3, 4, 5], &[1, 2, 3]).unwrap());
    // x[::-1, :, 4:0:-2]
    check(&e, "idx.slice_neg", &x.slice(&[2, 0, 4], &[-4, 4, 0], &[-1, 1, -2]).unwrap());
    check(&e, "idx.slice_axis", &x.slice_axis(2, 1, -1).unwrap());
    check(&e, "idx.flip", &x.flip(1).unwrap());

    let base = mlx::zeros(&[4, 6], Dtype::F32).unwrap();
    let upd = e.get("idx.su_upd");
    check(&e, "idx.slice_update", &base.slice_update(&upd, &[1, 0], &[3, 6], &[1, 2]).unwrap());
    let start = i32s(&[2], &[1]);
    check(&e, "idx.su_dyn", &base.slice_update_dynamic(&upd, &start, &[0]).unwrap());
    let start2 = i32s(&[1, 2], &[2]);
    check(&e, "idx.slice_dyn", &x.slice_dynamic(&start2, &[1, 2], &[3, 2, 3]).unwrap());
}

#[test]
fn gather_scatter() {
    let e = Expected::load();
    let x = e.get("idx.x");
    let ti = e.get("idx.take_idx");
    check(&e, "idx.take_ax1", &x.take(&ti, 1).unwrap());
    check(&e, "idx.take_flat", &x.take_flat(&ti).unwrap());
    let tal = e.get("idx.tal_idx");
    check(&e, "idx.take_along", &x.take_along_axis(&tal, 2).unwrap());
    check(&e, "idx.put_along", &x.put_along_axis(&tal, &Array::f32(-1.0), 2).unwrap());

    // Duplicate indices accumulate with Add.
    let z5 = mlx::zeros(&[5], Dtype::F32).unwrap();
    let idx = i32s(&[0, 2, 2], &[3]);
    let upd = f32s(&[1.0, 2.0, 3.0], &[3, 1]);
    check(&e, "idx.scatter_add", &mlx::scatter(ScatterOp::Add, &z5, &[&idx], &upd, &[0]).unwrap());
    let z34 = mlx::zeros(&[3, 4], Dtype::F32).unwrap();
    let (r, c) = (i32s(&[2, 0], &[2]), i32s(&[1, 3], &[2]));
    let u2 = f32s(&[5.0, 7.0], &[2, 1, 1]);
    check(&e, "idx.scatter_set2d", &mlx::scatter(ScatterOp::Set, &z34, &[&r, &c], &u2, &[0, 1]).unwrap());
    // By hand: max and min keep the extreme value per slot.
    let base = f32s(&[0.0, 10.0], &[2]);
    let i = i32s(&[0, 0, 1], &[3]);
    let u = f32s(&[3.0, 5.0, 4.0], &[3, 1]);
    let mx = mlx::scatter(ScatterOp::Max, &base, &[&i], &u, &[0]).unwrap();
    assert_eq!(mx.to_vec::<f32>().unwrap(), vec![5.0, 10.0]);
    let mn = mlx::scatter(ScatterOp::Min, &base, &[&i], &u, &[0]).unwrap();
    assert_eq!(mn.to_vec::<f32>().unwrap(), vec![0.0, 4.0]);

    let cond = x.gt(&Array::f32(30.0)).unwrap();
    check(&e, "idx.where", &mlx::where_(&cond, &x, &x.neg().unwrap()).unwrap());
}

#[test]
fn shape_ops() {
    let e = Expected::load();
    let x = e.get("idx.x");
    let x0 = x.take(&Array::i32(0), 0).unwrap();
    let x1 = x.take(&Array::i32(1), 0).unwrap();
    let x2 = x.take(&Array::i32(2), 0).unwrap();
    check(&e, "idx.pad_const", &x0.pad(&[0, 1], &[1, 0], &[0, 2], &Array::f32(9.0), "constant").unwrap());
    check(&e, "idx.pad_edge", &x0.pad(&[0, 1], &[0, 2], &[1, 1], &Array::f32(0.0), "edge").unwrap());
    let x1h = x1.slice_axis(0, 0, 2).unwrap();
    check(&e, "idx.concat", &mlx::concatenate(&[&x0, &x1h], 0).unwrap());
    check(&e, "idx.stack", &mlx::stack(&[&x0, &x2], 1).unwrap());
    let parts = x.split_at(&[1, 3], 1).unwrap();
    assert_eq!(parts.len(), 3);
    for (i, p) in parts.iter().enumerate() {
        check(&e, &format!("idx.split_at{i}"), p);
    }
    let halves = x.split(5, 2).unwrap();
    assert_eq!(halves.len(), 5);
    assert_eq!(halves[4].shape(), &[3, 4, 1]);
    let col = f32s(&[1.0, 2.0], &[2, 1]);
    check(&e, "idx.broadcast", &col.broadcast_to(&[3, 2, 4]).unwrap());
    let small = x0.slice(&[0, 0], &[2, 3], &[1, 1]).unwrap();
    check(&e, "idx.repeat", &small.repeat(2, 1).unwrap());
    check(&e, "idx.tile", &small.tile(&[2, 1, 2]).unwrap());
    check(&e, "idx.transpose", &x.transpose(&[2, 0, 1]).unwrap());
    check(&e, "idx.roll", &x0.roll(2, 1).unwrap());

    // By hand.
    let r = x.reshape(&[-1, 10]).unwrap();
    assert_eq!(r.shape(), &[6, 10]);
    assert_eq!(x.flatten(0, 1).unwrap().shape(), &[12, 5]);
    assert_eq!(x.expand_dims(&[0, 3]).unwrap().shape(), &[1, 3, 4, 1, 5]);
    assert_eq!(x.expand_dims(&[0]).unwrap().squeeze(&[0]).unwrap().shape(), &[3, 4, 5]);
    assert_eq!(x.swapaxes(0, -1).unwrap().shape(), &[5, 4, 3]);
    assert_eq!(x.t().unwrap().shape(), &[5, 4, 3]);
    let v = x.as_strided(&[2, 2], &[5, 1], 1).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 6.0, 7.0]);
    assert_eq!(x.astype(Dtype::I32).unwrap().dtype(), Dtype::I32);
    let bits = f32s(&[1.0], &[1]).view(Dtype::U32).unwrap();
    assert_eq!(bits.to_vec::<u32>().unwrap(), vec![0x3f80_0000]);
    let t = ones(&[3, 3]);
    assert_eq!(t.tril(0).unwrap().sum_all().unwrap().item_f32().unwrap(), 6.0);
    assert_eq!(t.triu(1).unwrap().sum_all().unwrap().item_f32().unwrap(), 3.0);
    let clipped = f32s(&[-2.0, 0.5, 3.0], &[3]).clip(Some(&Array::f32(0.0)), Some(&Array::f32(1.0))).unwrap();
    assert_eq!(clipped.to_vec::<f32>().unwrap(), vec![0.0, 0.5, 1.0]);
    let c = x.transpose(&[1, 0, 2]).unwrap().contiguous().unwrap();
    check(&e, "idx.x", &c.transpose(&[1, 0, 2]).unwrap());
}

#[test]
fn arithmetic_and_comparisons() {
    let e = Expected::load();
    let (a, b, pos) = (e.get("ar.a"), e.get("ar.b"), e.get("ar.pos"));
    let s07 = Array::f32(0.7);
    let cases: Vec<(&str, Array)> = vec![
        ("add", a.add(&b).unwrap()),
        ("sub", a.sub(&b).unwrap()),
        ("mul", a.mul(&b).unwrap()),
        ("div", a.div(&b).unwrap()),
        ("maximum", a.maximum(&b).unwrap()),
        ("minimum", a.minimum(&b).unwrap()),
        ("power", pos.power(&b).unwrap()),
        ("remainder", a.remainder(&s07).unwrap()),
        ("floor_divide", a.floor_divide(&s07).unwrap()),
        ("logaddexp", a.logaddexp(&b).unwrap()),
        ("exp", a.exp().unwrap()),
        ("log", pos.log().unwrap()),
        ("sqrt", pos.sqrt().unwrap()),
        ("rsqrt", pos.rsqrt().unwrap()),
        ("tanh", a.tanh().unwrap()),
        ("sigmoid", a.sigmoid().unwrap()),
        ("erf", a.erf().unwrap()),
        ("sin", a.sin().unwrap()),
        ("abs", a.abs().unwrap()),
        ("neg", a.neg().unwrap()),
        ("square", a.square().unwrap()),
        ("floor", a.mul_s(3.0).unwrap().floor().unwrap()),
    ];
    for (n, got) in &cases {
        check_tol(&e, &format!("ar.{n}"), got, 1e-5);
    }
    // Scalars keep bf16 math in bf16, as Python scalars do.
    let h = a.astype(Dtype::BF16).unwrap().mul_s(0.5).unwrap();
    let json = expected_json();
    assert_eq!(format!("mlx.core.{}", h.dtype()), json["ar.mul_s_bf16_dtype"].as_str().unwrap());
    let h1 = h.add_s(1.0).unwrap();
    assert_eq!(h1.dtype(), Dtype::BF16);
    check_tol(&e, "ar.mul_s_bf16", &h1, 0.0);

    let cmp: Vec<(&str, Array)> = vec![
        ("eq", a.floor().unwrap().eq(&b.floor().unwrap()).unwrap()),
        ("lt", a.lt(&b).unwrap()),
        ("ge", a.ge(&b).unwrap()),
        ("ne", a.ne(&b).unwrap()),
        ("and", a.gt(&Array::f32(0.0)).unwrap().logical_and(&b.gt(&Array::f32(0.0)).unwrap()).unwrap()),
    ];
    for (n, got) in &cmp {
        assert_eq!(got.dtype(), Dtype::Bool, "{n}");
        assert_exact(&format!("ar.{n}"), got, &e.get(&format!("ar.{n}")));
    }
    // By hand: integer and bitwise ops.
    let i = i32s(&[6, -7, 12], &[3]);
    let j = i32s(&[4, 2, 5], &[3]);
    assert_eq!(i.bitwise_and(&j).unwrap().to_vec::<i32>().unwrap(), vec![4, 0, 4]);
    assert_eq!(i.floor_divide(&j).unwrap().to_vec::<i32>().unwrap(), vec![1, -4, 2]);
    assert_eq!(i.left_shift(&Array::i32(1)).unwrap().to_vec::<i32>().unwrap(), vec![12, -14, 24]);
    assert_eq!(i.le(&j).unwrap().to_vec::<bool>().unwrap(), vec![false, true, false]);
}

#[test]
fn reductions_scans_sorting() {
    let e = Expected::load();
    let r = e.get("red.x");
    let t = 1e-5;
    check_tol(&e, "red.sum_1", &r.sum(&[1], false).unwrap(), t);
    check_tol(&e, "red.sum_02_keep", &r.sum(&[0, 2], true).unwrap(), t);
    check_tol(&e, "red.mean_all", &r.mean_all().unwrap(), t);
    check(&e, "red.max_2", &r.max(&[2], false).unwrap());
    check(&e, "red.min_0", &r.min(&[0], false).unwrap());
    check_tol(&e, "red.prod_2", &r.prod(&[2], false).unwrap(), t);
    assert_exact("red.argmax_1", &r.argmax(1, false).unwrap(), &e.get("red.argmax_1"));
    assert_exact("red.argmin_2_keep", &r.argmin(2, true).unwrap(), &e.get("red.argmin_2_keep"));
    check_tol(&e, "red.logsumexp_2", &r.logsumexp(&[2], false).unwrap(), t);
    check_tol(&e, "red.softmax_2", &r.softmax(&[-1], false).unwrap(), t);
    let sb = r.astype(Dtype::BF16).unwrap().softmax(&[-1], true).unwrap();
    assert_eq!(sb.dtype(), Dtype::BF16);
    check_tol(&e, "red.softmax_bf16_precise", &sb, 0.0);
    check_tol(&e, "red.var_1", &r.var(&[1], false, 1).unwrap(), t);
    check_tol(&e, "red.std_2", &r.std(&[2], false, 0).unwrap(), t);
    check_tol(&e, "red.cumsum_1", &r.cumsum(1, false, true).unwrap(), t);
    check_tol(&e, "red.cumsum_1_rev_excl", &r.cumsum(1, true, false).unwrap(), t);
    check_tol(&e, "red.cumprod_2", &r.cumprod(2, false, true).unwrap(), t);
    check(&e, "red.cummax_1", &r.cummax(1, false, true).unwrap());
    check_tol(&e, "red.logcumsumexp_2", &r.logcumsumexp(2, false, true).unwrap(), t);
    check(&e, "red.sort_1", &r.sort(1).unwrap());
    assert_exact("red.argsort_2", &r.argsort(2).unwrap(), &e.get("red.argsort_2"));
    check(&e, "red.topk3_sorted", &r.topk(3, 1).unwrap().sort(1).unwrap());
    assert_exact("red.all", &r.gt(&Array::f32(-3.0)).unwrap().all(&[1], false).unwrap(), &e.get("red.all"));
    assert_exact("red.any", &r.gt(&Array::f32(1.5)).unwrap().any(&[2], false).unwrap(), &e.get("red.any"));

    // argpartition / partition: everything before kth is <= the kth value,
    // everything after is >= (checked by hand on each row).
    let v = f32s(&[5.0, 1.0, 4.0, 2.0, 3.0, 0.0, 9.0], &[7]);
    let kth = 2;
    let idx = v.argpartition(kth, 0).unwrap().to_vec::<u32>().unwrap();
    let vals = v.to_vec::<f32>().unwrap();
    let part: Vec<f32> = idx.iter().map(|&i| vals[i as usize]).collect();
    assert_eq!(part[kth as usize], 2.0);
    assert!(part[..2].iter().all(|&p| p <= 2.0) && part[3..].iter().all(|&p| p >= 2.0), "{part:?}");
    let p = v.partition(kth, 0).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(p[kth as usize], 2.0);
    // Sum of bools and ints.
    let b = f32s(&[1.0, -1.0, 2.0], &[3]).gt(&Array::f32(0.0)).unwrap();
    assert_eq!(b.sum_all().unwrap().item_i64().unwrap(), 2);
}

#[test]
fn matmul_conv_fft() {
    let e = Expected::load();
    let t = 1e-4;
    let (a, b, c, d) = (e.get("mm.a"), e.get("mm.b"), e.get("mm.c"), e.get("mm.d"));
    check_tol(&e, "mm.ab", &a.matmul(&b).unwrap(), t);
    check_tol(&e, "mm.cd", &c.matmul(&d).unwrap(), t);
    let a0 = a.take(&Array::i32(0), 0).unwrap();
    check_tol(&e, "mm.addmm", &mlx::addmm(&e.get("mm.bias"), &a0, &b, 0.5, 2.0).unwrap(), t);
    // By hand: inner and outer products.
    let u = f32s(&[1.0, 2.0], &[2]);
    let w = f32s(&[3.0, 4.0, 5.0], &[3]);
    assert_eq!(u.outer(&w).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0]);
    assert_eq!(u.inner(&u).unwrap().item_f32().unwrap(), 5.0);

    let (x1, w1) = (e.get("conv.x1"), e.get("conv.w1"));
    check_tol(&e, "conv.y1", &mlx::conv1d(&x1, &w1, 2, 1, 1, 2).unwrap(), t);
    let (x2, w2) = (e.get("conv.x2"), e.get("conv.w2"));
    check_tol(&e, "conv.y2", &mlx::conv2d(&x2, &w2, [1, 2], [1, 0], [2, 1], 2).unwrap(), t);
    let (x3, w3) = (e.get("conv.x3"), e.get("conv.w3"));
    check_tol(&e, "conv.y3", &mlx::conv3d(&x3, &w3, [1, 1, 2], [1, 0, 1], [1, 1, 1], 1).unwrap(), t);
    let wt = e.get("conv.wt1");
    check_tol(&e, "conv.yt1", &mlx::conv_transpose(&x1, &wt, &[2], &[1], &[1], &[0], 1).unwrap(), t);

    let fx = e.get("fft.x");
    let rf = mlx::fft(FftKind::Rfft, &fx, 0, -1).unwrap();
    assert_eq!((rf.shape(), rf.dtype()), (&[2, 5][..], Dtype::C64));
    check_tol(&e, "fft.rfft_re", &rf.real().unwrap(), t);
    check_tol(&e, "fft.rfft_im", &rf.imag().unwrap(), t);
    let rf6 = mlx::fft(FftKind::Rfft, &fx, 6, -1).unwrap();
    check_tol(&e, "fft.rfft6_re", &rf6.real().unwrap(), t);
    check_tol(&e, "fft.rfft6_im", &rf6.imag().unwrap(), t);
    check_tol(&e, "fft.irfft", &mlx::fft(FftKind::Irfft, &rf, 0, -1).unwrap(), t);
    // fft then ifft is the identity (real part).
    let z = mlx::fft(FftKind::Ifft, &mlx::fft(FftKind::Fft, &fx, 0, 1).unwrap(), 0, 1).unwrap();
    assert_close("fft∘ifft", &z.real().unwrap(), &fx, t, t);
}

/// Shape and dtype errors come back as `Err` carrying MLX's own message
/// (recorded from Python), never as a crash.
#[test]
fn errors_carry_mlx_messages() {
    let json = expected_json();
    let want = |k: &str| json["errors"][k].as_str().unwrap().to_string();
    let err = |r: mlx::Result<Array>| r.expect_err("should fail").msg;
    assert_eq!(err(ones(&[3]).add(&ones(&[2]))), want("add_broadcast"));
    assert_eq!(err(ones(&[2, 3]).matmul(&ones(&[4, 5]))), want("matmul_shapes"));
    assert_eq!(err(ones(&[6]).reshape(&[4])), want("reshape"));
    assert_eq!(err(mlx::concatenate(&[&ones(&[2, 3]), &ones(&[2, 4])], 0)), want("concat"));
    let c3 = mlx::conv3d(&ones(&[1, 4, 4, 4, 4]), &ones(&[4, 2, 2, 2, 2]), [1; 3], [0; 3], [1; 3], 2);
    assert_eq!(err(c3), want("conv3d_groups"));
    let q = mlx::quant::quantize(&ones(&[8, 100]), &mlx::quant::QuantSpec::affine(64, 4));
    assert_eq!(q.expect_err("quantize").msg, want("quantize_group"));
    assert_eq!(err(ones(&[3, 4]).take_along_axis(&i32s(&[0], &[1]), 1)), want("take_along_ndim"));
    assert_eq!(ones(&[5]).split(2, 0).expect_err("split").msg, want("split_uneven"));
    let s = mlx::fast::scaled_dot_product_attention(
        &ones(&[1, 3, 4, 8]),
        &ones(&[1, 2, 4, 8]),
        &ones(&[1, 2, 4, 8]),
        1.0,
        mlx::fast::Mask::None,
        None,
    );
    assert_eq!(err(s), want("sdpa_dims"));

    // Checked on the Rust side, still errors rather than panics.
    assert!(Array::from_slice(&[1.0f32, 2.0], &[3]).is_err());
    assert!(ones(&[2, 2]).slice(&[0], &[1], &[1]).is_err());
    assert!(ones(&[2]).item_f32().is_err());
    assert!(ones(&[2]).pad(&[0], &[1], &[], &Array::f32(0.0), "constant").is_err());
    assert!(mlx::conv(&ones(&[1, 4, 2]), &ones(&[2, 2, 2]), &[1], &[0, 0], &[1], 1).is_err());
    let e = ones(&[2]).transpose(&[3]).unwrap_err();
    assert!(e.msg.contains("transpose"), "{}", e.msg);
    // The message is per call: a later success does not leave stale text.
    assert!(ones(&[2]).add(&ones(&[2])).is_ok());
}
