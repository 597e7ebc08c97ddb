//! Runs: [`Worker::run`] and [`Worker::submit`] hand the orchestration function an
//! [`L3Orch`], whose submits check every task's arguments (access, liveness, device
//! provenance, signature, overlapping writes) before the engine sees them, and whose scopes
//! release their intermediates once their tasks retire; [`RunHandle`] waits for the run's
//! end. Its own file because this is the task path's front half: everything between the
//! user's orchestration and the engine's submit.

use super::buffer::{self, Buffer};
use super::callable::{ChipCallableId, SubCallableId};
use super::engine::{MemberTarget, NewMember, RunShared, RunSummary, Shared};
use super::worker::Worker;
use super::L3Error;
use crate::task_args::TaskArgs;
use simpler_core::mailbox::CallConfig;
use simpler_core::{
    access_permits, AccessMode, AddressSpace, ArgDirection, BackendKind, TensorArgType,
};
use std::sync::Arc;
use std::time::Duration;

impl Worker {
    /// Runs `orch` (which submits tasks through [`L3Orch`]) and waits for every task.
    pub fn run<F>(&self, orch: F) -> Result<RunSummary, L3Error>
    where
        F: FnOnce(&mut L3Orch<'_>) -> Result<(), L3Error>,
    {
        self.submit(orch)?.wait(None)
    }

    /// Runs `orch` on this thread, then returns a handle to wait for the tasks it submitted.
    /// A second run is admitted once the previous one drained.
    pub fn submit<F>(&self, orch: F) -> Result<RunHandle, L3Error>
    where
        F: FnOnce(&mut L3Orch<'_>) -> Result<(), L3Error>,
    {
        let shared = self.shared()?;
        let (run_id, result) = shared.begin_run();
        let mut o = L3Orch {
            worker: self,
            shared,
            run_id,
            scopes: vec![Vec::new()],
            scope_first: vec![shared.next_task_id()],
            last_task: None,
        };
        // A panicking orchestration must still close its run, or the next run would wait for
        // it forever; the panic continues once the run is closed.
        let mut panic = None;
        let mut outcome =
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| orch(&mut o))) {
                Ok(r) => r,
                Err(p) => {
                    panic = Some(p);
                    Err(L3Error::Orchestration(
                        "the orchestration function panicked".into(),
                    ))
                }
            };
        // The run's own scope: its intermediates go once every task retired.
        while o.scopes.len() > 1 {
            o.end_scope();
        }
        let run_allocs = std::mem::take(&mut o.scopes[0]);
        shared.defer_release(o.last_task, run_allocs);
        if outcome.is_ok() && o.scope_first.len() != 1 {
            outcome = Err(L3Error::Orchestration("unbalanced scopes".into()));
        }
        let error = outcome.err().map(|e| match e {
            e @ L3Error::Orchestration(_) => e,
            other => L3Error::Orchestration(crate::ErrorChain(&other).to_string()),
        });
        shared.end_orchestration(error);
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        Ok(RunHandle { result, run_id })
    }
}

/// The handle of a submitted run: wait for its terminal result, as often as needed.
pub struct RunHandle {
    result: Arc<RunShared>,
    run_id: u64,
}

impl RunHandle {
    /// Waits for the run's terminal result, at most `timeout` (forever with `None`). After
    /// the run ends, every call returns the same result; a timeout returns
    /// [`L3Error::WaitTimeout`] and the run goes on.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<RunSummary, L3Error> {
        self.result.wait(timeout)
    }

    /// Whether the run has ended.
    pub fn done(&self) -> bool {
        self.result.done()
    }

    /// The run's id on its Worker (the one [`RunSummary::run_id`] reports).
    pub fn run_id(&self) -> u64 {
        self.run_id
    }
}

/// The orchestration API of one L3 run.
pub struct L3Orch<'w> {
    worker: &'w Worker,
    shared: &'w Arc<Shared>,
    run_id: u64,
    /// Intermediates per open scope (index 0: the run's).
    scopes: Vec<Vec<Buffer>>,
    /// The first task id of each open scope.
    scope_first: Vec<u64>,
    last_task: Option<u64>,
}

impl L3Orch<'_> {
    /// The id of the run this orchestration submits into (its [`RunHandle::run_id`]).
    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    /// The Worker (to create buffers inside the orchestration).
    pub fn worker(&self) -> &Worker {
        self.worker
    }

    /// Runs `body` in a nested scope (up to 64 deep): the intermediates it allocates with
    /// [`Self::alloc`] are released once the scope has ended and every task submitted so far
    /// has retired. Tasks inside a scope depend on tasks outside it exactly as anywhere else.
    pub fn scope<R>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<R, L3Error>,
    ) -> Result<R, L3Error> {
        if self.scopes.len() > simpler_core::ring::MAX_SCOPE_DEPTH {
            return Err(L3Error::Orchestration(format!(
                "scopes nest deeper than {}",
                simpler_core::ring::MAX_SCOPE_DEPTH
            )));
        }
        self.scopes.push(Vec::new());
        self.scope_first.push(self.shared.next_task_id());
        let r = body(self);
        self.end_scope();
        r
    }

    fn end_scope(&mut self) {
        if self.scopes.len() <= 1 {
            return;
        }
        let allocs = self.scopes.pop().unwrap_or_default();
        let first = self.scope_first.pop().unwrap_or(0);
        let last = self.last_task.filter(|&l| l >= first);
        self.shared.defer_release(last, allocs);
    }

    /// An intermediate buffer of `nbytes` (FORK_SHM, READWRITE, zeroed) owned by the innermost
    /// scope: after the scope ends and its tasks retire it is released, and any tensor or
    /// descriptor derived from it afterwards is refused ([`L3Error::BufferClosed`]).
    pub fn alloc(&mut self, nbytes: u64) -> Result<Buffer, L3Error> {
        if nbytes == 0 {
            return Err(L3Error::ZeroSizeBuffer);
        }
        // Back-pressure: when the arena is full but earlier scopes' intermediates are waiting
        // for their tasks to retire, wait for them instead of failing.
        let buf = loop {
            match buffer::create_arena(
                &self.worker.arena,
                self.worker.mint(),
                AccessMode::ReadWrite,
                nbytes,
            ) {
                Err(L3Error::ArenaFull { .. }) if self.shared.wait_for_release() => continue,
                other => break other?,
            }
        };
        self.worker
            .lock_buffers()
            .insert(buf.identity(), buf.clone());
        self.scopes
            .last_mut()
            .expect("the run's scope is always open")
            .push(buf.clone());
        Ok(buf)
    }

    /// How deep the scopes are nested (0 at the run's top level).
    pub fn scope_depth(&self) -> usize {
        self.scopes.len() - 1
    }

    fn check_chip(&self, chip: usize) -> Result<(), L3Error> {
        if chip >= self.shared.chips {
            return Err(L3Error::UnknownChip {
                chip,
                chips: self.shared.chips,
            });
        }
        Ok(())
    }

    /// Submits `callable` to chip `chip`; tags drive the dependencies.
    pub fn submit_next_level(
        &mut self,
        chip: usize,
        callable: ChipCallableId,
        args: &TaskArgs,
        config: &CallConfig,
    ) -> Result<u64, L3Error> {
        self.submit_next_level_group(callable, &[chip], std::slice::from_ref(args), config)
    }

    /// Submits one group task: member `i` runs `args_list[i]` on chip `chips[i]`; the task
    /// completes when every member has.
    pub fn submit_next_level_group(
        &mut self,
        callable: ChipCallableId,
        chips: &[usize],
        args_list: &[TaskArgs],
        config: &CallConfig,
    ) -> Result<u64, L3Error> {
        let c = self
            .worker
            .chip_callables
            .get(callable.index)
            .filter(|_| callable.worker == self.worker.serial)
            .ok_or(L3Error::UnknownCallable)?;
        config.validate().map_err(L3Error::Config)?;
        if chips.len() != args_list.len() || chips.is_empty() {
            return Err(L3Error::GroupShape {
                workers: chips.len(),
                args: args_list.len(),
            });
        }
        let mut members = Vec::with_capacity(chips.len());
        for (i, (&chip, args)) in chips.iter().zip(args_list).enumerate() {
            self.check_chip(chip)?;
            if chips[..i].contains(&chip) {
                return Err(L3Error::DuplicateChip { chip });
            }
            check_args(args)?;
            check_signature(args, c.callable.signature())?;
            self.check_device_args(chip, args)?;
            self.check_live(args)?;
            members.push(NewMember {
                target: MemberTarget::Chip(chip),
                blob: args.to_mailbox_blob().map_err(L3Error::Args)?,
                tensors: args.tensors(),
                tags: args.tags(),
            });
        }
        let id = self.shared.submit(c.digest, config, members)?;
        self.last_task = Some(id);
        Ok(id)
    }

    /// Submits `callable` to any idle SUB child.
    pub fn submit_sub(&mut self, callable: SubCallableId, args: &TaskArgs) -> Result<u64, L3Error> {
        self.submit_sub_group(callable, std::slice::from_ref(args))
    }

    /// Submits a group of SUB members, each on a distinct SUB child.
    pub fn submit_sub_group(
        &mut self,
        callable: SubCallableId,
        args_list: &[TaskArgs],
    ) -> Result<u64, L3Error> {
        let c = self
            .worker
            .sub_callables
            .get(callable.index)
            .filter(|_| callable.worker == self.worker.serial)
            .ok_or(L3Error::UnknownCallable)?;
        let have = self.worker.config.sub_workers;
        if args_list.is_empty() {
            return Err(L3Error::GroupShape {
                workers: 0,
                args: 0,
            });
        }
        if args_list.len() > have {
            return Err(L3Error::NoSubWorkers {
                needed: args_list.len(),
                have,
            });
        }
        let mut members = Vec::with_capacity(args_list.len());
        for args in args_list {
            check_args(args)?;
            for (index, t) in args.tensors().iter().enumerate() {
                if t.buffer.space() == Some(AddressSpace::Device) {
                    return Err(L3Error::DeviceToSub { index });
                }
            }
            self.check_live(args)?;
            members.push(NewMember {
                target: MemberTarget::AnySub,
                blob: args.to_mailbox_blob().map_err(L3Error::Args)?,
                tensors: args.tensors(),
                tags: args.tags(),
            });
        }
        let config: CallConfig = bytemuck::Zeroable::zeroed();
        let id = self.shared.submit(c.digest, &config, members)?;
        self.last_task = Some(id);
        Ok(id)
    }

    /// Every tensor must name a live buffer of this Worker by its exact descriptor: a tensor
    /// kept past `release_buffer` (or past its scope) would reach memory that now belongs to
    /// another buffer.
    fn check_live(&self, args: &TaskArgs) -> Result<(), L3Error> {
        let live = self.worker.lock_buffers();
        for (index, t) in args.tensors().iter().enumerate() {
            let ok = live
                .get(&t.buffer.identity)
                .is_some_and(|b| !b.is_closed() && b.inner.desc == t.buffer);
            if !ok {
                return Err(L3Error::DeadBuffer {
                    index,
                    buffer_id: t.buffer.identity.buffer_id,
                });
            }
        }
        Ok(())
    }

    /// Every DEVICE tensor must name exactly a live allocation this Worker made on `chip`.
    fn check_device_args(&self, chip: usize, args: &TaskArgs) -> Result<(), L3Error> {
        for (index, t) in args.tensors().iter().enumerate() {
            let d = &t.buffer;
            if d.space() != Some(AddressSpace::Device) {
                continue;
            }
            let reason = if d.identity.owner_instance_id != self.worker.nonce {
                Some("DEVICE backing minted by another Worker".to_string())
            } else {
                let addr = d.body_address().unwrap_or(0);
                let allocs = self.worker.lock_device_allocs();
                match allocs[chip].get(&addr) {
                    Some(&len) if len == d.nbytes => None,
                    Some(_) => Some(format!("{addr:#x} on chip {chip} has a different size")),
                    None => {
                        let elsewhere = allocs
                            .iter()
                            .enumerate()
                            .find(|(_, a)| a.contains_key(&addr))
                            .map(|(c, _)| c);
                        Some(match elsewhere {
                            Some(c) => format!("{addr:#x} lives on chip {c}, not chip {chip}"),
                            None => format!(
                                "{addr:#x} is not the start of a live allocation on chip {chip}"
                            ),
                        })
                    }
                }
            };
            if let Some(reason) = reason {
                return Err(L3Error::DeviceProvenance { index, reason });
            }
        }
        Ok(())
    }
}

/// Submit-time checks every task's arguments pass: the tag/access rule again (a `set_tag`
/// may have changed it), no REMOTE_SIDECAR, no two writing arguments over shared bytes.
fn check_args(args: &TaskArgs) -> Result<(), L3Error> {
    let tensors = args.tensors();
    let tags = args.tags();
    for (index, (t, &tag)) in tensors.iter().zip(tags).enumerate() {
        let granted = t.buffer.access_mode().unwrap_or(AccessMode::Read);
        // At level 3 an OUTPUT is a write into the caller's buffer, so it needs WRITE too (the
        // reference lets a READ buffer through here and loses the writes in the child).
        let output_on_read = tag == TensorArgType::Output && granted == AccessMode::Read;
        if !access_permits(granted, tag) || output_on_read {
            return Err(L3Error::Access {
                index,
                tag,
                granted,
            });
        }
        if t.buffer.backend() == Some(BackendKind::RemoteSidecar) {
            return Err(L3Error::RemoteSidecar { index });
        }
    }
    // Two arguments of one task may not share bytes when either writes (NO_DEP exempt): the
    // reference compares each writer with the arguments after it; this compares every pair.
    let writes = |tag: TensorArgType| {
        matches!(
            tag,
            TensorArgType::Output | TensorArgType::InOut | TensorArgType::OutputExisting
        )
    };
    let tracked = |tag: TensorArgType| tag != TensorArgType::NoDep;
    for i in 0..tensors.len() {
        for j in i + 1..tensors.len() {
            let either = writes(tags[i]) || writes(tags[j]);
            if either
                && tracked(tags[i])
                && tracked(tags[j])
                && super::engine::may_overlap(&tensors[i], &tensors[j])
            {
                return Err(L3Error::OverlappingWrites {
                    first: i,
                    second: j,
                });
            }
        }
    }
    Ok(())
}

/// The arguments must match the chip callable's signature: as many tensors, and each tag
/// agreeing with the direction (IN: INPUT; OUT: OUTPUT / OUTPUT_EXISTING; INOUT: INOUT;
/// NO_DEP fits any direction).
fn check_signature(args: &TaskArgs, signature: &[ArgDirection]) -> Result<(), L3Error> {
    if args.tensor_count() != signature.len() {
        return Err(L3Error::Signature {
            expected: signature.len(),
            got: args.tensor_count(),
        });
    }
    for (index, (&tag, &dir)) in args.tags().iter().zip(signature).enumerate() {
        let ok = matches!(
            (dir, tag),
            (_, TensorArgType::NoDep)
                | (ArgDirection::In, TensorArgType::Input)
                | (
                    ArgDirection::Out,
                    TensorArgType::Output | TensorArgType::OutputExisting
                )
                | (ArgDirection::InOut, TensorArgType::InOut)
        );
        if !ok {
            return Err(L3Error::DirectionTag { index, tag });
        }
        let granted = args.tensors()[index]
            .buffer
            .access_mode()
            .unwrap_or(AccessMode::Read);
        let reads = dir != ArgDirection::Out;
        let writes = dir != ArgDirection::In;
        if (writes && granted == AccessMode::Read) || (reads && granted == AccessMode::Write) {
            return Err(L3Error::Access {
                index,
                tag,
                granted,
            });
        }
    }
    Ok(())
}
