//! The server's logit bias and penalties against mlx-lm's own
//! `make_logits_processors` (same order, same window), run in the
//! reference environment.

use crate::common;

use common::reference;
use famlx::decode::LogitsParams;
use mlx::Array;
use std::process::Command;

#[test]
fn bias_and_penalties_match_mlx_lm() {
    let _g = crate::common::mlx_lock();
    let v = 64usize;
    let logits: Vec<f32> = (0..v).map(|i| ((i * 37 % 23) as f32 - 11.0) / 3.0).collect();
    let history: Vec<u32> = vec![30, 31, 5, 9, 60, 3, 3, 12, 40, 41, 5, 7, 7, 7, 1, 2, 3, 63, 0, 9, 9, 22, 5, 8];
    let p = LogitsParams {
        bias: vec![(4, 2.5), (9, -1.0), (63, 0.75)],
        repetition_penalty: Some(1.3),
        presence_penalty: Some(0.4),
        frequency_penalty: Some(0.25),
        context_size: 20,
    };
    let ours =
        p.apply(&Array::from_slice(&logits, &[1, v as i32]).unwrap(), &history).unwrap().to_vec::<f32>().unwrap();
    let script = format!(
        r#"
import json, mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors
ps = make_logits_processors(logit_bias={{4: 2.5, 9: -1.0, 63: 0.75}}, repetition_penalty=1.3,
    repetition_context_size=20, presence_penalty=0.4, presence_context_size=20,
    frequency_penalty=0.25, frequency_context_size=20)
l = mx.array({logits:?})[None]
t = mx.array({history:?})
for p in ps:
    l = p(t, l)
print(json.dumps(l[0].tolist()))
"#
    );
    let o = Command::new(reference::python()).args(["-c", &script]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let theirs: Vec<f32> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert!((a - b).abs() < 1e-5, "token {i}: famlx {a}, mlx-lm {b}");
    }
    // The window matters: an id only before the last 20 tokens is not penalised.
    assert_eq!(ours[31], logits[31]);
}
