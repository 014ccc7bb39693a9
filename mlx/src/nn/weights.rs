//! How layers read their weights: by name, with the shape and element kind
//! the model's config implies, so a checkpoint that does not fit its config
//! is refused at load with the tensor named (as mlx-lm's strict loading
//! does), not at the first forward with an MLX shape error.

use super::parallel::Parallel;
use crate::quant::QuantSpec;
use crate::{Array, Dtype, Error, ErrorKind, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// The element type a tensor must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A floating-point type (weights, norms, biases, scales).
    Float,
    /// `uint32`: packed quantized values.
    Packed,
    /// Anything (e.g. microscaling scales, stored as `uint8`).
    Any,
}

impl Kind {
    fn accepts(self, d: Dtype) -> bool {
        match self {
            Kind::Float => d.is_float(),
            Kind::Packed => d == Dtype::U32,
            Kind::Any => true,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Kind::Float => "a floating-point type",
            Kind::Packed => "uint32 (packed quantized values)",
            Kind::Any => "any type",
        }
    }
}

/// Read access to a model's weights by name, with per-tensor quantization.
pub trait Weights {
    /// The tensor called `name`, if present.
    fn get(&self, name: &str) -> Option<Array>;
    /// How the matrix under `prefix` (e.g. `model.layers.0.mlp.up_proj`) is
    /// quantized, or `None` when it is stored dense.
    fn quant(&self, prefix: &str) -> Option<QuantSpec>;

    /// The tensor `name`, or an error naming it.
    fn require(&self, name: &str) -> Result<Array> {
        self.get(name).ok_or_else(|| Error::new(ErrorKind::MissingWeight, format!("missing weight {name}")))
    }

    /// The tensor `name`, which must have `shape` (`-1` matches any size)
    /// and an element type of `kind`. A missing or mismatched tensor is an
    /// error naming it with what was expected and found; a [`Checked`]
    /// store records it instead and hands out a stand-in, so one load
    /// reports every problem at once.
    fn tensor(&self, name: &str, shape: &[i32], kind: Kind) -> Result<Array> {
        let t = self.get(name).ok_or_else(|| Problem::Missing(name.to_string()).into_error())?;
        match mismatch(name, &t, shape, kind) {
            Some(p) => Err(p.into_error()),
            None => Ok(t),
        }
    }

    /// Records a problem found while loading (a [`Checked`] store keeps it
    /// for the final report); other stores ignore it.
    fn report(&self, _problem: Problem) {}

    /// How the model being loaded is split over a group of processes
    /// (`None`: whole, in one process).
    fn parallel(&self) -> Option<Parallel> {
        None
    }

    /// Elements `[start, stop)` along `axis` of tensor `name` (`None` when
    /// absent). A store that can read the slice alone from disk does, so a
    /// rank of a split model reads only its share.
    fn slice(&self, name: &str, axis: i32, start: i32, stop: i32) -> Result<Option<Array>> {
        self.get(name).map(|t| t.slice_axis(axis, start, stop)).transpose()
    }

    /// The runs `ranges` along `axis` of tensor `name`, side by side, each
    /// read through [`Weights::slice`]; an error naming the tensor when it
    /// is absent.
    fn runs(&self, name: &str, axis: i32, ranges: &[(i32, i32)]) -> Result<Array> {
        let parts = ranges
            .iter()
            .map(|&(a, b)| {
                self.slice(name, axis, a, b)?.ok_or_else(|| Error::msg(Problem::Missing(name.into()).to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        match parts.as_slice() {
            [one] => Ok(one.clone()),
            _ => crate::concatenate(&parts.iter().collect::<Vec<_>>(), axis),
        }
    }
}

/// Something wrong with a checkpoint's tensors.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// A tensor the model needs is absent.
    Missing(String),
    /// A tensor has another shape than the config implies.
    Shape {
        /// the tensor
        name: String,
        /// what the config implies (`-1`: any)
        expected: Vec<i32>,
        /// what the checkpoint holds
        found: Vec<i32>,
    },
    /// A tensor has an element type the layer cannot use.
    Dtype {
        /// the tensor
        name: String,
        /// what the layer needs
        expected: &'static str,
        /// what the checkpoint holds
        found: String,
    },
}

impl Problem {
    /// The [`ErrorKind`] of this problem: [`ErrorKind::MissingWeight`] for
    /// an absent tensor, [`ErrorKind::Shape`] for a mismatched one.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Problem::Missing(_) => ErrorKind::MissingWeight,
            Problem::Shape { .. } | Problem::Dtype { .. } => ErrorKind::Shape,
        }
    }

    fn into_error(self) -> Error {
        Error::new(self.kind(), self.to_string())
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Missing(n) => write!(f, "missing weight {n}"),
            Problem::Shape { name, expected, found } => {
                write!(f, "tensor {name}: shape {found:?}, expected {}", shape_text(expected))
            }
            Problem::Dtype { name, expected, found } => write!(f, "tensor {name}: dtype {found}, expected {expected}"),
        }
    }
}

fn shape_text(s: &[i32]) -> String {
    let dims: Vec<String> = s.iter().map(|&d| if d < 0 { "*".to_string() } else { d.to_string() }).collect();
    format!("[{}]", dims.join(", "))
}

/// What is wrong with `t` as the tensor `name` of `shape` and `kind`, if anything.
pub fn mismatch(name: &str, t: &Array, shape: &[i32], kind: Kind) -> Option<Problem> {
    let fits = t.ndim() == shape.len() && t.shape().iter().zip(shape).all(|(&a, &b)| b < 0 || a == b);
    if !fits {
        return Some(Problem::Shape { name: name.to_string(), expected: shape.to_vec(), found: t.shape().to_vec() });
    }
    if !kind.accepts(t.dtype()) {
        return Some(Problem::Dtype {
            name: name.to_string(),
            expected: kind.describe(),
            found: t.dtype().to_string(),
        });
    }
    None
}

/// A [`Weights`] view that records every missing or mismatched tensor
/// instead of stopping at the first, handing out zero stand-ins of the
/// expected shape so the loader goes on; [`Checked::finish`] then reports
/// all of them in one line.
pub struct Checked<'a> {
    inner: &'a dyn Weights,
    problems: RefCell<Vec<Problem>>,
}

impl<'a> Checked<'a> {
    /// Wraps `inner`.
    pub fn new(inner: &'a dyn Weights) -> Self {
        Checked { inner, problems: RefCell::new(Vec::new()) }
    }

    /// The problems recorded so far.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems.borrow().clone()
    }

    /// `result` when nothing was recorded; otherwise one error listing every
    /// problem (and `result`'s own error, when it failed too).
    pub fn finish<T>(&self, result: Result<T>) -> Result<T> {
        let problems = self.problems();
        if problems.is_empty() {
            return result;
        }
        let mut msg = summarize(&problems);
        // A missing tensor is what the host explains further (it lists the
        // tensors nothing read), so it decides the kind over a mismatch.
        let missing = problems.iter().any(|p| p.kind() == ErrorKind::MissingWeight);
        let mut kind = if missing { ErrorKind::MissingWeight } else { ErrorKind::Shape };
        if let Err(e) = result {
            if !problems.iter().any(|p| e.msg.contains(&p.to_string())) {
                msg = format!("{msg}; then: {}", e.msg);
            }
            if e.kind == ErrorKind::MissingWeight {
                kind = ErrorKind::MissingWeight;
            }
        }
        Err(Error::new(kind, msg))
    }
}

impl Weights for Checked<'_> {
    fn get(&self, name: &str) -> Option<Array> {
        self.inner.get(name)
    }
    fn quant(&self, prefix: &str) -> Option<QuantSpec> {
        self.inner.quant(prefix)
    }
    fn tensor(&self, name: &str, shape: &[i32], kind: Kind) -> Result<Array> {
        let problem = match self.inner.get(name) {
            None => Problem::Missing(name.to_string()),
            Some(t) => match mismatch(name, &t, shape, kind) {
                None => return Ok(t),
                Some(p) => p,
            },
        };
        self.report(problem);
        let dims: Vec<i32> = shape.iter().map(|&d| d.max(1)).collect();
        crate::zeros(&dims, if kind == Kind::Packed { Dtype::U32 } else { Dtype::F32 })
    }
    fn report(&self, problem: Problem) {
        self.problems.borrow_mut().push(problem);
    }
    fn parallel(&self) -> Option<Parallel> {
        self.inner.parallel()
    }
    fn slice(&self, name: &str, axis: i32, start: i32, stop: i32) -> Result<Option<Array>> {
        self.inner.slice(name, axis, start, stop)
    }
}

/// `name` with its first all-digit component replaced by `{}`, and that
/// number (layer indices: `model.layers.7.mlp` → `model.layers.{}.mlp`, 7).
fn pattern(name: &str) -> (String, Option<u64>) {
    let mut parts: Vec<&str> = name.split('.').collect();
    match parts.iter().position(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        Some(i) => {
            let n = parts[i].parse().ok();
            parts[i] = "{}";
            (parts.join("."), n)
        }
        None => (name.to_string(), None),
    }
}

/// `0-3,5,7-9`.
fn ranges(mut v: Vec<u64>) -> String {
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", v[i], v[j]) } else { v[i].to_string() });
        i = j + 1;
    }
    out.join(",")
}

/// Tensor names in one line, layers folded: `model.layers.{0-15}.mlp.up_proj.weight`.
pub fn fold_names(names: &[String]) -> String {
    let mut groups: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for n in names {
        let (p, i) = pattern(n);
        groups.entry(p).or_default().extend(i);
    }
    groups
        .into_iter()
        .map(|(p, mut idx)| {
            idx.sort_unstable();
            idx.dedup();
            match idx.as_slice() {
                [] => p,
                [one] => p.replacen("{}", &one.to_string(), 1),
                _ => p.replacen("{}", &format!("{{{}}}", ranges(idx)), 1),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every problem in one line, the same problem of several layers folded.
pub fn summarize(problems: &[Problem]) -> String {
    let missing: Vec<String> =
        problems.iter().filter_map(|p| if let Problem::Missing(n) = p { Some(n.clone()) } else { None }).collect();
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("{} missing weight{}: {}", missing.len(), plural(missing.len()), fold_names(&missing)));
    }
    // Mismatches: the same expectation and finding across layers, folded.
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in problems {
        let (name, what) = match p {
            Problem::Missing(_) => continue,
            Problem::Shape { name, expected, found } => {
                (name, format!("shape {found:?}, expected {}", shape_text(expected)))
            }
            Problem::Dtype { name, expected, found } => (name, format!("dtype {found}, expected {expected}")),
        };
        groups.entry(what).or_default().push(name.clone());
    }
    for (what, names) in groups {
        parts.push(format!("tensor {}: {what}", fold_names(&names)));
    }
    parts.join("; ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fold_by_layer() {
        let names: Vec<String> = [0, 1, 2, 3, 5, 7, 8]
            .iter()
            .map(|i| format!("model.layers.{i}.mlp.up_proj.weight"))
            .chain(["lm_head.weight".to_string(), "model.layers.3.mlp.down_proj.weight".to_string()])
            .collect();
        assert_eq!(
            fold_names(&names),
            "lm_head.weight, model.layers.3.mlp.down_proj.weight, model.layers.{0-3,5,7-8}.mlp.up_proj.weight"
        );
    }

    #[test]
    fn summary_lists_every_kind_once() {
        let p = vec![
            Problem::Missing("a.0.w".into()),
            Problem::Missing("a.1.w".into()),
            Problem::Shape { name: "b.0.w".into(), expected: vec![4, -1], found: vec![2, 2] },
            Problem::Shape { name: "b.1.w".into(), expected: vec![4, -1], found: vec![2, 2] },
            Problem::Dtype { name: "c".into(), expected: "a floating-point type", found: "int32".into() },
        ];
        assert_eq!(
            summarize(&p),
            "2 missing weights: a.{0-1}.w; tensor c: dtype int32, expected a floating-point type; \
             tensor b.{0-1}.w: shape [2, 2], expected [4, *]"
        );
    }

    /// A store with one tensor, `a` (`[2]` float32).
    struct One;
    impl Weights for One {
        fn get(&self, name: &str) -> Option<Array> {
            (name == "a").then(|| Array::from_slice(&[1.0f32, 2.0], &[2]).expect("array"))
        }
        fn quant(&self, _prefix: &str) -> Option<QuantSpec> {
            None
        }
    }

    #[test]
    fn finish_sets_the_kind_of_what_went_wrong() {
        let c = Checked::new(&One);
        let _ = c.tensor("a", &[3], Kind::Float);
        assert_eq!(c.finish(Ok(())).expect_err("mismatch").kind, ErrorKind::Shape);
        let _ = c.tensor("b", &[2], Kind::Float);
        let e = c.finish(Ok(())).expect_err("missing");
        assert_eq!(e.kind, ErrorKind::MissingWeight, "{e}");
        assert_eq!(One.require("b").expect_err("missing").kind, ErrorKind::MissingWeight);
        assert_eq!(One.tensor("a", &[3], Kind::Float).expect_err("shape").kind, ErrorKind::Shape);
    }
}
