use mlx::{Array, Dtype};

#[test]
fn runtime_matches_build() {
    mlx::check_runtime().unwrap();
}

#[test]
fn add_and_errors() {
    let a = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let b = a.add(&a).unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
    let c = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let e = a.add(&c).unwrap_err();
    assert!(e.msg.contains("broadcast"), "{}", e.msg);
    assert_eq!(b.dtype(), Dtype::F32);
}
