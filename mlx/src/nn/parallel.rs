//! How a model is split over a group of processes (see
//! [`crate::distributed`]): tensor parallel, where every rank holds a share
//! of each layer's heads and MLP columns, or pipeline parallel, where every
//! rank holds a run of whole layers.

/// The two ways of splitting a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelMode {
    /// Heads and MLP columns split; partial outputs summed over the group.
    Tensor,
    /// Layers split; activations passed from rank to rank.
    Pipeline,
}

/// This rank's part of a model split over `size` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    /// How the model is split.
    pub mode: ParallelMode,
    /// This rank.
    pub rank: i32,
    /// Ranks in the group.
    pub size: i32,
}

impl Parallel {
    /// This rank's share of `n` units, `[start, stop)`: as even as whole
    /// units allow, the larger shares last (`4` over 3 ranks: 1, 1, 2).
    /// An error when a rank would get none.
    pub fn share(&self, n: i32, what: &str) -> crate::Result<(i32, i32)> {
        share(n, self.rank, self.size, what)
    }

    /// The tensor-parallel split, when this is one.
    pub fn tensor(p: Option<Parallel>) -> Option<Parallel> {
        p.filter(|p| p.mode == ParallelMode::Tensor && p.size > 1)
    }

    /// The pipeline split, when this is one.
    pub fn pipeline(p: Option<Parallel>) -> Option<Parallel> {
        p.filter(|p| p.mode == ParallelMode::Pipeline && p.size > 1)
    }
}

/// Rank `rank`'s share of `n` units over `size` ranks (see [`Parallel::share`]).
pub fn share(n: i32, rank: i32, size: i32, what: &str) -> crate::Result<(i32, i32)> {
    if n < size {
        return Err(crate::Error::msg(format!(
            "cannot split {n} {what} over {size} ranks: each rank needs at least one"
        )));
    }
    let at = |r: i64| ((r * n as i64) / size as i64) as i32;
    Ok((at(rank as i64), at(rank as i64 + 1)))
}

/// The query and key/value heads one rank of a tensor-parallel split holds:
/// its share of the `n_heads` query heads, and the key/value heads those
/// read (a key/value head is held by every rank whose queries read it, as
/// mlx-lm repeats them when ranks outnumber them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadShare {
    /// Query heads `[start, stop)`.
    pub q: (i32, i32),
    /// Key/value heads `[start, stop)`.
    pub kv: (i32, i32),
}

impl HeadShare {
    /// The heads of rank `p.rank`, or an error naming the counts when the
    /// split would give a rank queries of a head it does not hold in the
    /// grouped-query pattern attention needs (each local key/value head
    /// read by the same number of local queries, in order).
    pub fn new(p: &Parallel, n_heads: i32, n_kv_heads: i32) -> crate::Result<HeadShare> {
        let bad = || {
            crate::Error::msg(format!(
                "cannot split {n_heads} attention heads ({n_kv_heads} key/value heads) over {} ranks",
                p.size
            ))
        };
        if n_kv_heads <= 0 || n_heads % n_kv_heads != 0 {
            return Err(bad());
        }
        let (qa, qb) = p.share(n_heads, "attention heads")?;
        let g = n_heads / n_kv_heads;
        let (ka, kb) = (qa / g, (qb - 1) / g + 1);
        let (nq, nk) = (qb - qa, kb - ka);
        if nq % nk != 0 || (qa..qb).any(|h| h / g != ka + (h - qa) / (nq / nk)) {
            return Err(bad());
        }
        Ok(HeadShare { q: (qa, qb), kv: (ka, kb) })
    }
}

impl HeadShare {
    /// This rank's heads when every rank of `p` gets a valid share (see
    /// [`HeadShare::new`]) whose `head_dim`-wide features start and end on
    /// whole groups of `group` (a quantized layer's inputs split only
    /// there); `None` when some rank would not, and the heads stay whole on
    /// every rank. Every rank decides alike, or they would disagree on
    /// which layers sum over the group.
    pub fn split(p: &Parallel, n_heads: i32, n_kv_heads: i32, head_dim: i32, group: Option<i32>) -> Option<HeadShare> {
        let aligned =
            |(a, b): (i32, i32)| group.is_none_or(|g| g > 0 && (a * head_dim) % g == 0 && (b * head_dim) % g == 0);
        let all = (0..p.size)
            .all(|rank| HeadShare::new(&Parallel { rank, ..*p }, n_heads, n_kv_heads).is_ok_and(|s| aligned(s.q)));
        if all {
            HeadShare::new(p, n_heads, n_kv_heads).ok()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(rank: i32, size: i32) -> Parallel {
        Parallel { mode: ParallelMode::Tensor, rank, size }
    }

    #[test]
    fn shares_cover_everything_once() {
        for size in 1..6 {
            for n in size..20 {
                let mut next = 0;
                for r in 0..size {
                    let (a, b) = share(n, r, size, "x").unwrap();
                    assert_eq!(a, next);
                    assert!(b > a);
                    next = b;
                }
                assert_eq!(next, n);
            }
        }
        assert!(share(2, 0, 3, "heads").unwrap_err().msg.contains("cannot split 2 heads over 3 ranks"));
    }

    #[test]
    fn heads_repeat_kv_where_ranks_outnumber_them() {
        // 4 query heads, 2 kv heads over 3 ranks: q 0 | 1 | 2,3 read kv 0 | 0 | 1.
        let got: Vec<HeadShare> = (0..3).map(|r| HeadShare::new(&p(r, 3), 4, 2).unwrap()).collect();
        assert_eq!(got[0], HeadShare { q: (0, 1), kv: (0, 1) });
        assert_eq!(got[1], HeadShare { q: (1, 2), kv: (0, 1) });
        assert_eq!(got[2], HeadShare { q: (2, 4), kv: (1, 2) });
        assert_eq!(HeadShare::new(&p(1, 2), 8, 2).unwrap(), HeadShare { q: (4, 8), kv: (1, 2) });
        // 9 heads in groups of 3 over 2 ranks: rank 0 would hold queries
        // 0-3, three of kv head 0 and one of kv head 1.
        let e = HeadShare::new(&p(0, 2), 9, 3).unwrap_err();
        assert!(e.msg.contains("cannot split 9 attention heads (3 key/value heads) over 2 ranks"), "{e}");
        assert!(HeadShare::new(&p(0, 3), 2, 2).is_err());
    }

    #[test]
    fn ranks_agree_on_whether_heads_split() {
        // 4 heads of 16 features over 3 ranks: rank 2's heads 2-3 start on
        // a group of 32, ranks 0 and 1's do not; nobody splits.
        for r in 0..3 {
            assert_eq!(HeadShare::split(&p(r, 3), 4, 2, 16, Some(32)), None);
            assert!(HeadShare::split(&p(r, 3), 4, 2, 32, Some(32)).is_some());
        }
        assert_eq!(HeadShare::split(&p(1, 2), 4, 2, 16, Some(32)), Some(HeadShare { q: (2, 4), kv: (1, 2) }));
        assert_eq!(HeadShare::split(&p(0, 2), 9, 3, 8, None), None);
    }
}
