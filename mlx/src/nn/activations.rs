//! Activations, compiled into single kernels where MLX can (decode is bound
//! by the host's time per graph node).

use crate::{Array, Result};

/// Runs `f` compiled once per thread (shapeless, so one trace serves every
/// shape), falling back to the plain ops if MLX cannot compile it.
macro_rules! compiled {
    ($f:expr, $args:expr) => {{
        // Leaked on purpose: dropping a compiled function during process exit
        // can run after MLX's own compile cache is gone.
        thread_local! {
            static FUSED: &'static Option<crate::compile::Compiled> =
                Box::leak(Box::new(crate::compile::Compiled::new($f, true).ok()));
        }
        let args: &[&Array] = $args;
        match FUSED.with(|f| f.as_ref().map(|c| c.call(args))) {
            Some(Ok(mut v)) if v.len() == 1 => Ok(v.remove(0)),
            _ => {
                let owned: Vec<Array> = args.iter().map(|a| (*a).clone()).collect();
                ($f)(&owned).map(|mut v| v.remove(0))
            }
        }
    }};
}

/// `silu(gate) * up`, the SwiGLU activation, compiled so it runs as one
/// fused kernel instead of three.
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    // On CPU streams famlx's primitive computes the same bits, faster.
    if let Some(y) = crate::fast::cpu_swiglu(gate, up)? {
        return Ok(y);
    }
    compiled!(|a: &[Array]| Ok(vec![a[0].mul(&a[0].sigmoid()?)?.mul(&a[1])?]), &[gate, up])
}

/// `gelu_approx(gate) * up`, Gemma's GeGLU, compiled into one kernel
/// (the plain ops are nine).
pub fn geglu(gate: &Array, up: &Array) -> Result<Array> {
    compiled!(|a: &[Array]| Ok(vec![gelu_approx_ops(&a[0])?.mul(&a[1])?]), &[gate, up])
}

/// `x * sigmoid(x)`.
pub fn silu(x: &Array) -> Result<Array> {
    x.mul(&x.sigmoid()?)
}

/// The tanh approximation of GELU (`gelu_pytorch_tanh`), compiled into one
/// kernel as MLX's own `nn.gelu_approx` is.
pub fn gelu_approx(x: &Array) -> Result<Array> {
    compiled!(|a: &[Array]| Ok(vec![gelu_approx_ops(&a[0])?]), &[x])
}

fn gelu_approx_ops(x: &Array) -> Result<Array> {
    // 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))
    let c = (2.0f64 / std::f64::consts::PI).sqrt();
    let inner = x.add(&x.pow_s(3.0)?.mul_s(0.044715)?)?.mul_s(c)?;
    x.mul_s(0.5)?.mul(&inner.tanh()?.add_s(1.0)?)
}

/// The activation joining the gate and up projections of a gated MLP
/// ([`super::GatedMlp`], [`super::SwitchGlu`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GluActivation {
    /// `silu(gate) * up` (Qwen, Llama-style MoE).
    Silu,
    /// `gelu_tanh(gate) * up` (Gemma).
    GeluApprox,
}

impl GluActivation {
    /// `act(gate) * up`.
    pub fn apply(self, gate: &Array, up: &Array) -> Result<Array> {
        match self {
            GluActivation::Silu => swiglu(gate, up),
            GluActivation::GeluApprox => geglu(gate, up),
        }
    }
}

/// A pointwise activation, by the name configs give it (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `x * sigmoid(x)` (`silu`, `swish`).
    Silu,
    /// The exact GELU, `x/2 (1 + erf(x/√2))` (`gelu`; MLX's `nn.gelu`).
    Gelu,
    /// The tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`
    /// as mlx-lm runs them; MLX's `nn.gelu_approx`).
    GeluApprox,
    /// `max(x, 0)`.
    Relu,
}

impl Activation {
    /// The names a config may give, with the activation each means.
    pub const NAMES: [(&'static str, Activation); 7] = [
        ("silu", Activation::Silu),
        ("swish", Activation::Silu),
        ("gelu", Activation::Gelu),
        ("gelu_new", Activation::GeluApprox),
        ("gelu_pytorch_tanh", Activation::GeluApprox),
        ("gelu_fast", Activation::GeluApprox),
        ("relu", Activation::Relu),
    ];

    /// The activation a config's `hidden_act` names; `None` for a name
    /// famlx does not implement.
    pub fn named(name: &str) -> Option<Activation> {
        Self::NAMES.iter().find(|(n, _)| *n == name).map(|&(_, a)| a)
    }

    /// Applies it.
    pub fn apply(self, x: &Array) -> Result<Array> {
        match self {
            Activation::Silu => silu(x),
            Activation::Gelu => gelu(x),
            Activation::GeluApprox => gelu_approx(x),
            Activation::Relu => x.maximum(&x.scalar_like(0.0)?),
        }
    }
}

/// The exact GELU, `x/2 (1 + erf(x/√2))`, compiled into one kernel.
pub fn gelu(x: &Array) -> Result<Array> {
    compiled!(
        |a: &[Array]| {
            let x = &a[0];
            Ok(vec![x.mul(&x.div_s(std::f64::consts::SQRT_2)?.erf()?.add_s(1.0)?)?.div_s(2.0)?])
        },
        &[x]
    )
}
