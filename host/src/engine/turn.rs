//! The start of each engine turn: intake of the requests that join, and,
//! for an engine split over ranks, the lead's news for the others (which
//! rows end now, and each arrival's seed) or a follower's reading of it.

use super::request::Request;
use super::row::Row;
use super::{lockstep, Engine, FinishReason, Replay, Role};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// How long an idle lead of a server split over ranks waits for a request
/// before it sends an empty turn.
const IDLE_TURN: Duration = Duration::from_secs(1);

impl Engine {
    /// The turn that starts now: a follower's from rank 0, else the
    /// requests waiting in `jobs` (none when there is no queue).
    pub(super) fn next_turn(
        &mut self,
        jobs: Option<&Receiver<Request>>,
        role: Role,
        live: &[&Row],
        open: &mut bool,
        replay: Option<&Replay>,
    ) -> Intake {
        match (jobs, replay) {
            (_, Some(replay)) => follow_turn(replay),
            (Some(jobs), None) => self.intake(jobs, role, live, open),
            (None, None) => Intake { arrived: Vec::new(), halts: Vec::new(), closed: true },
        }
    }

    /// Intake: the requests that join this turn (waiting for one when
    /// nothing runs), as many as the batch has room for. A lead also
    /// decides which rows end now and sends the turn to the other ranks.
    fn intake(&mut self, jobs: &Receiver<Request>, role: Role, live: &[&Row], open: &mut bool) -> Intake {
        let mut arrived: Vec<Request> = Vec::new();
        while *open && live.len() + arrived.len() < self.settings.max_concurrency.max(1) {
            let idle = live.is_empty() && arrived.is_empty();
            let job = match (idle, role) {
                (false, _) => jobs.try_recv(),
                // An idle lead still sends a turn now and then, so a rank
                // that has gone is noticed (and the server ends) without
                // waiting for a request.
                (true, Role::Lead) => jobs.recv_timeout(IDLE_TURN).map_err(|e| match e {
                    RecvTimeoutError::Timeout => TryRecvError::Empty,
                    RecvTimeoutError::Disconnected => TryRecvError::Disconnected,
                }),
                (true, _) => jobs.recv().map_err(|_| TryRecvError::Disconnected),
            };
            match job {
                Ok(j) => {
                    self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
                    if !j.cancel.load(Ordering::SeqCst) {
                        arrived.push(j);
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => *open = false,
            }
        }
        let closed = !*open && live.is_empty() && arrived.is_empty();
        let mut turn = Intake { arrived, halts: Vec::new(), closed };
        if role == Role::Lead {
            turn.halts = halts(live);
            self.announce(&mut turn);
        }
        turn
    }

    /// A lead sends the turn to the other ranks, with a seed for every
    /// request that came without one (each rank must draw alike).
    fn announce(&self, turn: &mut Intake) {
        let mut out = lockstep::Turn { halts: turn.halts.clone(), closed: turn.closed, ..Default::default() };
        for (i, j) in turn.arrived.iter_mut().enumerate() {
            let seed = *j.params.seed.get_or_insert_with(|| lockstep::fresh_seed(self.serial + i as u64));
            out.arrivals.push(lockstep::Arrival { origin: j.origin.clone(), id: j.id.clone(), seed });
        }
        lockstep::lead(&out).unwrap_or_else(|e| lost(e));
    }
}

/// What a turn brings: the requests that join, the rows that end now
/// and why, and whether the engine stops.
pub(super) struct Intake {
    pub(super) arrived: Vec<Request>,
    pub(super) halts: Vec<(u64, FinishReason)>,
    pub(super) closed: bool,
}

/// A follower's turn: what rank 0 sent, each arrival made again.
fn follow_turn(replay: &Replay) -> Intake {
    let turn = lockstep::follow().unwrap_or_else(|e| lost(e));
    let mut arrived = Vec::with_capacity(turn.arrivals.len());
    for a in &turn.arrivals {
        let mut r = replay(&a.origin).unwrap_or_else(|e| lost(e));
        r.id = a.id.clone();
        r.params.seed = Some(a.seed);
        arrived.push(r);
    }
    Intake { arrived, halts: turn.halts, closed: turn.closed }
}

/// The rows a lead ends now: those whose listener has gone, and those past
/// their deadline.
fn halts(live: &[&Row]) -> Vec<(u64, FinishReason)> {
    let now = Instant::now();
    live.iter()
        .filter_map(|r| {
            if r.job.cancel.load(Ordering::SeqCst) {
                Some((r.serial, FinishReason::Cancelled))
            } else if r.deadline.is_some_and(|d| now > d) {
                Some((r.serial, FinishReason::Length))
            } else {
                None
            }
        })
        .collect()
}

/// The ranks no longer agree (a peer died): this rank ends, with one line.
fn lost(e: anyhow::Error) -> ! {
    crate::distributed::last_words(&format!("rank {}: the ranks lost each other: {e:#}", crate::distributed::rank()));
    std::process::exit(1)
}
