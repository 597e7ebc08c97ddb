//! [`L4Orch`]: submits over ranks, with dependencies from the level-3 TensorMap, dispatch of
//! ready tasks to their ranks, and failure propagation.
//!
//! The orchestration function runs on rank 0's MPI thread. A submit wires the task's producers
//! and, if it has none left, sends it to its rank(s) at once; replies are collected without
//! blocking after each submit and, once the function returns, until every task is terminal.
//! A ready SUB task on rank 0 runs inline on rank 0's own Worker.

use super::wire::{decode_reply, Command, RankError, TAG_REPLY};
use super::worker::{L4Callable, L4Worker};
use super::L4Error;
use crate::l3::tensormap::TensorMap;
use crate::task_args::TaskArgs;
use mpi::traits::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// What a finished run reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L4Summary {
    /// Tasks submitted.
    pub tasks: usize,
    /// From the run's start to its last completion.
    pub elapsed: Duration,
}

struct Member {
    rank: usize,
    callable: L4Callable,
    args: TaskArgs,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Running,
    Done,
    Failed,
}

struct Node {
    members: Vec<Member>,
    remaining: usize,
    fanin: usize,
    fanout: Vec<u64>,
    poison: Option<u64>,
    state: State,
    error: Option<L4Error>,
}

/// The orchestration handle of one run on rank 0.
pub struct L4Orch<'w> {
    w: &'w mut L4Worker,
    base: u64,
    nodes: Vec<Node>,
    map: TensorMap,
    failed: HashSet<u64>,
    errors: Vec<L4Error>,
    depth: usize,
}

impl L4Worker {
    /// Runs `orch` (which submits through [`L4Orch`]) and waits for every task it submitted.
    /// Returns the first task error once all are terminal (independent tasks still ran), or
    /// [`L4Error::RankLost`] if a rank stopped answering (the group is then terminal).
    pub fn run<F>(&mut self, orch: F) -> Result<L4Summary, L4Error>
    where
        F: FnOnce(&mut L4Orch<'_>) -> Result<(), L4Error>,
    {
        let (summary, errors) = self.run_collect(orch)?;
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }

    /// As [`run`](Self::run), but returns every task error of the run (in the order they
    /// happened) beside the summary; `Err` only if the orchestration function failed or the
    /// group was terminal before the run.
    pub fn run_collect<F>(&mut self, orch: F) -> Result<(L4Summary, Vec<L4Error>), L4Error>
    where
        F: FnOnce(&mut L4Orch<'_>) -> Result<(), L4Error>,
    {
        self.alive()?;
        let start = Instant::now();
        let base = self.next_task;
        let mut o = L4Orch {
            w: self,
            base,
            nodes: Vec::new(),
            map: TensorMap::default(),
            failed: HashSet::new(),
            errors: Vec::new(),
            depth: 0,
        };
        let r = orch(&mut o);
        // Drained even when the function failed: its submitted tasks are in flight on ranks.
        o.drain();
        let tasks = o.nodes.len();
        o.w.next_task = base + tasks as u64;
        r?;
        Ok((
            L4Summary {
                tasks,
                elapsed: start.elapsed(),
            },
            o.errors,
        ))
    }
}

impl L4Orch<'_> {
    /// The job's size in ranks.
    pub fn size(&self) -> usize {
        self.w.size()
    }

    /// Runs `f` one scope deeper. Scopes nest as at level 3; at level 4 they own no
    /// intermediates (there is no `alloc` yet), so closing one releases nothing.
    pub fn scope<R>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<R, L4Error>,
    ) -> Result<R, L4Error> {
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// How many scopes are open.
    pub fn scope_depth(&self) -> usize {
        self.depth
    }

    /// Test hook: tells `rank` to end at once, in the middle of this run.
    #[doc(hidden)]
    pub fn kill_rank(&mut self, rank: usize) -> Result<(), L4Error> {
        self.w.kill_rank(rank)
    }

    /// Every error of the run so far, in the order they happened.
    pub fn errors(&self) -> &[L4Error] {
        &self.errors
    }

    /// Submits `callable` to chip 0 of worker rank `rank`; tags drive the dependencies.
    pub fn submit_next_level(
        &mut self,
        rank: usize,
        callable: L4Callable,
        args: &TaskArgs,
    ) -> Result<u64, L4Error> {
        self.submit_next_level_group(callable, &[rank], std::slice::from_ref(args))
    }

    /// One DAG node over several ranks: member `i` runs `args_list[i]` on `ranks[i]`; the task
    /// completes when every member has (and fails if one does).
    pub fn submit_next_level_group(
        &mut self,
        callable: L4Callable,
        ranks: &[usize],
        args_list: &[TaskArgs],
    ) -> Result<u64, L4Error> {
        if matches!(callable, L4Callable::Sub(_)) {
            return Err(L4Error::Orchestration(
                "submit_next_level takes a chip callable or a rank orchestration (use submit_sub for SUB)".into(),
            ));
        }
        self.submit_members(callable, ranks, args_list)
    }

    /// Submits SUB `callable` to a SUB child of `rank` (rank 0 included: its SUB runs inline
    /// on rank 0 when ready). Unlike level 3 the rank is named: a SUB child is host-local.
    pub fn submit_sub(
        &mut self,
        rank: usize,
        callable: L4Callable,
        args: &TaskArgs,
    ) -> Result<u64, L4Error> {
        if !matches!(callable, L4Callable::Sub(_)) {
            return Err(L4Error::Orchestration(
                "submit_sub takes a SUB callable".into(),
            ));
        }
        self.submit_members(callable, &[rank], std::slice::from_ref(args))
    }

    fn submit_members(
        &mut self,
        callable: L4Callable,
        ranks: &[usize],
        args_list: &[TaskArgs],
    ) -> Result<u64, L4Error> {
        self.w.alive()?;
        if ranks.len() != args_list.len()
            || ranks.is_empty()
            || ranks
                .iter()
                .enumerate()
                .any(|(i, r)| ranks[..i].contains(r))
        {
            return Err(L4Error::GroupShape {
                ranks: ranks.len(),
                args: args_list.len(),
            });
        }
        for &r in ranks {
            // Rank 0 has no chips: only SUB tasks run there.
            let chip_on_root = r == 0 && !matches!(callable, L4Callable::Sub(_));
            if r >= self.w.size() || chip_on_root {
                return Err(L4Error::UnknownRank {
                    rank: r,
                    size: self.w.size(),
                });
            }
        }
        let id = self.base + self.nodes.len() as u64;
        let mut producers = Vec::new();
        let mut poison = None;
        {
            let base = self.base;
            let nodes = &self.nodes;
            let live = |task: u64| {
                task.checked_sub(base)
                    .and_then(|i| nodes.get(i as usize))
                    .is_some_and(|n| matches!(n.state, State::Pending | State::Running))
            };
            for args in args_list {
                for (t, &tag) in args.tensors().iter().zip(args.tags()) {
                    self.map
                        .track(id, t, tag, &live, &self.failed, &mut producers, &mut poison);
                }
            }
        }
        let mut fanin = 0;
        for p in producers {
            let n = self.node_mut(p).expect("a live producer is in this run");
            n.fanout.push(id);
            fanin += 1;
        }
        self.nodes.push(Node {
            members: ranks
                .iter()
                .zip(args_list)
                .map(|(&rank, args)| Member {
                    rank,
                    callable,
                    args: args.clone(),
                })
                .collect(),
            remaining: ranks.len(),
            fanin,
            fanout: Vec::new(),
            poison,
            state: State::Pending,
            error: None,
        });
        if fanin == 0 {
            self.ready(id);
        }
        self.pump(false);
        Ok(id)
    }

    fn node_mut(&mut self, id: u64) -> Option<&mut Node> {
        let i = id.checked_sub(self.base)?;
        self.nodes.get_mut(i as usize)
    }

    /// Task `id` has no unfinished producer: fail it if one failed, else dispatch it.
    fn ready(&mut self, id: u64) {
        let n = self.node_mut(id).expect("ready names a task of this run");
        if let Some(producer) = n.poison {
            self.finish(id, Some(L4Error::Upstream { task: id, producer }));
            return;
        }
        n.state = State::Running;
        let mut local = Vec::new();
        let mut sends = Vec::new();
        for (i, m) in n.members.iter().enumerate() {
            if m.rank == 0 {
                local.push(i);
                continue;
            }
            let (kind, callable) = match m.callable {
                L4Callable::Chip(c) => (0, c),
                L4Callable::Sub(c) => (1, c),
                L4Callable::Orch(c) => (2, c),
            };
            let blob = match m.args.to_mailbox_blob() {
                Ok(b) => b,
                Err(e) => {
                    local.clear();
                    self.finish(id, Some(L4Error::L3(crate::l3::L3Error::Args(e))));
                    return;
                }
            };
            let tags = m.args.tags().iter().map(|&t| t as i32 as u8).collect();
            sends.push((
                m.rank,
                Command::Run {
                    task: id,
                    kind,
                    callable,
                    tags,
                    blob,
                },
            ));
        }
        for (rank, cmd) in sends {
            self.w.send(rank, &cmd);
        }
        for i in local {
            let r = self.run_local(id, i);
            self.member_done(id, r);
        }
    }

    /// Runs member `i` of task `id` (a SUB on rank 0) on rank 0's own Worker.
    fn run_local(&mut self, id: u64, i: usize) -> Option<L4Error> {
        let n = self.node_mut(id).expect("a running task");
        let args = n.members[i].args.clone();
        let L4Callable::Sub(c) = n.members[i].callable else {
            unreachable!("submit refuses everything but SUB callables on rank 0")
        };
        let Some(&sub) = self.w.callables.sub.get(c as usize) else {
            return Some(L4Error::TaskFailed {
                task: id,
                rank: 0,
                message: format!("no SUB callable {c}"),
            });
        };
        self.w
            .local
            .run(|o| o.submit_sub(sub, &args).map(drop))
            .err()
            .map(|e| L4Error::TaskFailed {
                task: id,
                rank: 0,
                message: crate::ErrorChain(&e).to_string(),
            })
    }

    fn member_done(&mut self, id: u64, error: Option<L4Error>) {
        let Some(n) = self.node_mut(id) else {
            return;
        };
        if n.state != State::Running {
            return;
        }
        n.remaining -= 1;
        if n.error.is_none() {
            n.error = error;
        }
        if n.remaining == 0 {
            let e = n.error.take();
            self.finish(id, e);
        }
    }

    /// Marks `id` terminal and releases (or fails) its consumers.
    fn finish(&mut self, id: u64, error: Option<L4Error>) {
        let mut work = vec![(id, error)];
        while let Some((id, error)) = work.pop() {
            let Some(n) = self.node_mut(id) else {
                continue;
            };
            if matches!(n.state, State::Done | State::Failed) {
                continue;
            }
            let failed = error.is_some();
            n.state = if failed { State::Failed } else { State::Done };
            let fanout = std::mem::take(&mut n.fanout);
            if let Some(e) = error {
                self.failed.insert(id);
                self.errors.push(e);
            }
            for c in fanout {
                let consumer = self.node_mut(c).expect("a consumer of this run");
                if failed && consumer.poison.is_none() {
                    consumer.poison = Some(id);
                }
                consumer.fanin -= 1;
                if consumer.fanin == 0 {
                    match consumer.poison {
                        Some(producer) => {
                            work.push((c, Some(L4Error::Upstream { task: c, producer })))
                        }
                        None => self.ready(c),
                    }
                }
            }
        }
    }

    fn pending(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.state, State::Pending | State::Running))
    }

    /// Collects replies: without blocking (`wait == false`), or until a reply arrives or the
    /// reply timeout passes (then the ranks with tasks in flight are lost).
    fn pump(&mut self, wait: bool) -> bool {
        let deadline = Instant::now() + self.w.config.reply_timeout;
        loop {
            let got = self
                .w
                .world()
                .any_process()
                .immediate_matched_probe_with_tag(TAG_REPLY);
            if let Some((msg, status)) = got {
                let rank = status.source_rank() as usize;
                let bytes = super::worker::receive_matched(msg, status);
                match decode_reply(&bytes) {
                    Ok((task, r)) => {
                        let e = r.err().map(|error| match error {
                            RankError::Task { message } => L4Error::TaskFailed {
                                task,
                                rank,
                                message,
                            },
                            error => L4Error::Rank { rank, error },
                        });
                        self.member_done(task, e);
                    }
                    Err(error) => self.errors.push(L4Error::Rank { rank, error }),
                }
                if !wait {
                    continue;
                }
                return true;
            }
            if !wait {
                return false;
            }
            if Instant::now() >= deadline {
                self.lose_silent_ranks();
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Waits for every task; a silence longer than the reply timeout ends the group.
    fn drain(&mut self) {
        while self.pending() {
            if self.w.lost.is_some() {
                self.fail_all_pending();
                return;
            }
            self.pump(true);
        }
    }

    /// The ranks with a task in flight did not answer in time: the first becomes the lost
    /// rank and every unfinished task fails.
    fn lose_silent_ranks(&mut self) {
        let silent = self
            .nodes
            .iter()
            .filter(|n| n.state == State::Running)
            .flat_map(|n| n.members.iter().map(|m| m.rank))
            .find(|&r| r != 0);
        let rank = silent.unwrap_or(0);
        self.w.lost = Some(rank);
        self.errors.push(L4Error::RankLost {
            rank,
            waiting_for: "a task reply".into(),
        });
        self.fail_all_pending();
    }

    fn fail_all_pending(&mut self) {
        let lost = self.w.lost;
        for n in &mut self.nodes {
            if matches!(n.state, State::Pending | State::Running) {
                n.state = State::Failed;
                n.fanout.clear();
                let _ = n.error.take();
            }
        }
        if !self
            .errors
            .iter()
            .any(|e| matches!(e, L4Error::RankLost { .. }))
        {
            self.errors.push(L4Error::GroupTerminal { lost });
        }
    }
}
