//! MLX's distributed collectives through famlx's shim: 2 and 3 real
//! processes in a ring group on 127.0.0.1, configured through the
//! environment as `mlx.launch` configures them. The ranks are this test
//! binary itself (`harness = false`), run again with `FAMLX_TEST_RANK` set:
//! each joins the group and prints what each collective gave it as one
//! JSON line.

use mlx::distributed as dist;
use mlx::{Array, Dtype};
use serde_json::Value;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Runs `n` ranks and returns each one's JSON line, in rank order.
fn run_ring(n: usize) -> Vec<Value> {
    let dir = std::env::temp_dir().join(format!("famlx-dist-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts: Vec<Vec<String>> = free_ports(n).iter().map(|p| vec![format!("127.0.0.1:{p}")]).collect();
    let hostfile = dir.join("hosts.json");
    std::fs::write(&hostfile, serde_json::to_string(&hosts).unwrap()).unwrap();
    let mut kids: Vec<_> = (0..n)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .env("FAMLX_TEST_RANK", "1")
                .env("MLX_RANK", r.to_string())
                .env("MLX_HOSTFILE", &hostfile)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    while kids.iter_mut().any(|k| k.try_wait().unwrap().is_none()) {
        if start.elapsed() > Duration::from_secs(60) {
            for k in &mut kids {
                let _ = k.kill();
            }
            panic!("ranks did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kids.into_iter()
        .enumerate()
        .map(|(r, mut k)| {
            let (mut out, mut err) = (String::new(), String::new());
            k.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            k.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            assert!(k.wait().unwrap().success(), "rank {r} failed: {err}");
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("rank {r} printed {out:?}: {e}"))
        })
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn collectives_over_a_ring_of_two_and_three() {
    for n in [2usize, 3] {
        let outs = run_ring(n);
        let rank_sum: f64 = (0..n).map(|r| r as f64 + 1.0).sum();
        let ten_sum: f64 = (0..n).map(|r| 10.0 * r as f64).sum();
        let gathered: Vec<f64> = (0..n).flat_map(|r| [r as f64 + 1.0, 10.0 * r as f64]).collect();
        let passed: i64 = 100 + (1..n as i64).sum::<i64>();
        for (r, o) in outs.iter().enumerate() {
            assert_eq!(o["rank"], r as i64);
            assert_eq!(o["size"], n as i64);
            assert_eq!(floats(&o["sum"]), vec![rank_sum, ten_sum], "rank {r} of {n}");
            assert_eq!(floats(&o["max"]), vec![n as f64, 10.0 * (n - 1) as f64], "rank {r} of {n}");
            assert_eq!(floats(&o["gathered"]), gathered, "rank {r} of {n}");
            assert_eq!(o["gathered_shape"], serde_json::json!([n, 2]));
            // Rank r saw the token after ranks 1..=r added theirs; rank 0
            // got it back from the last rank.
            let want = if r == 0 { passed } else { 100 + (1..=r as i64).sum::<i64>() };
            assert_eq!(o["passed"], want, "rank {r} of {n}");
        }
    }
}

fn a_lone_process_is_a_group_of_one() {
    let g = dist::group().unwrap();
    assert_eq!(g, dist::Group::SINGLE);
    let x = Array::from_slice(&[1.5f32, -2.0], &[2]).unwrap();
    assert_eq!(dist::all_sum(&x).unwrap().to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
    assert!(dist::is_available("ring").unwrap());
}

fn rank_main() -> mlx::Result<()> {
    let g = dist::init("ring", true)?;
    let mine = Array::from_slice(&[g.rank as f32 + 1.0, 10.0 * g.rank as f32], &[2])?;
    let sum = dist::all_sum(&mine)?.to_vec::<f32>()?;
    let max = dist::all_max(&mine)?.to_vec::<f32>()?;
    let gathered = dist::all_gather(&mine.reshape(&[1, 2])?)?;
    let gathered_shape = gathered.shape().to_vec();
    let gathered = gathered.to_vec::<f32>()?;
    // A token passed once around the ring: each rank adds its rank.
    let next = (g.rank + 1) % g.size;
    let prev = (g.rank + g.size - 1) % g.size;
    let passed = if g.rank == 0 {
        dist::send(&Array::from_slice(&[100i32], &[1])?, next)?.eval()?;
        dist::recv(&[1], Dtype::I32, prev)?.to_vec::<i32>()?[0]
    } else {
        let got = dist::recv(&[1], Dtype::I32, prev)?;
        let out = got.add(&Array::from_slice(&[g.rank], &[1])?)?;
        dist::send(&out, next)?.eval()?;
        out.to_vec::<i32>()?[0]
    };
    println!(
        "{{\"rank\":{},\"size\":{},\"sum\":{sum:?},\"max\":{max:?},\"gathered\":{gathered:?},\"gathered_shape\":{gathered_shape:?},\"passed\":{passed}}}",
        g.rank, g.size
    );
    Ok(())
}

fn main() {
    if std::env::var_os("FAMLX_TEST_RANK").is_some() {
        if let Err(e) = rank_main() {
            eprintln!("rank failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    a_lone_process_is_a_group_of_one();
    println!("test a_lone_process_is_a_group_of_one ... ok");
    collectives_over_a_ring_of_two_and_three();
    println!("test collectives_over_a_ring_of_two_and_three ... ok");
}
