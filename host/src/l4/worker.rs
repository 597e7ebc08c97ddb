//! [`L4Worker`], rank 0's handle on the job: start-up, buffers on any rank, copies between
//! rank 0 and one rank, and close.

use super::wire::{decode_reply, Command, RankError, TAG_CMD, TAG_DATA, TAG_REPLY};
use super::L4Error;
use crate::l3::import::differing_fields;
use crate::l3::{Buffer, ChipCallableId, L3Error, L3Orch, SubCallableId, Worker};
use crate::task_args::TaskArgs;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use simpler_core::{AccessMode, BackendKind, BufferDescriptor, CanonicalIdentity};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A rank's own orchestration: one L3 run on the rank that receives the level-4 task's
/// arguments and may fan them out over the rank's chips and SUB children (its `L3Orch`
/// derives the dependencies among them as any level-3 run does). The level-4 task completes
/// when that run has drained, and fails with the run's first error.
pub type RankOrch = Arc<dyn Fn(&mut L3Orch<'_>, &TaskArgs) -> Result<(), L3Error> + Send + Sync>;

/// The callables a rank registered, in registration order: an [`L4Callable`] indexes them.
#[derive(Clone, Default)]
pub struct Callables {
    /// Chip callables.
    pub chip: Vec<ChipCallableId>,
    /// SUB callables.
    pub sub: Vec<SubCallableId>,
    /// Rank orchestrations.
    pub orch: Vec<RankOrch>,
}

impl std::fmt::Debug for Callables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callables")
            .field("chip", &self.chip)
            .field("sub", &self.sub)
            .field("orch", &self.orch.len())
            .finish()
    }
}

/// Registers the job's callables on one rank's Worker (before its `init`). Every rank runs the
/// same function, so index `i` names the same callable on every rank.
pub type RankSetup = fn(&mut Worker) -> Result<Callables, L3Error>;

/// A callable at level 4: an index into every rank's [`Callables`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4Callable {
    /// Chip callable `i`, run on chip 0 of the target rank.
    Chip(u32),
    /// SUB callable `i`, run on a SUB child of the target rank.
    Sub(u32),
    /// Rank orchestration `i` ([`RankOrch`]), run as one L3 run on the target rank: how a
    /// level-4 task uses every chip of its rank.
    Orch(u32),
}

/// How the job runs.
#[derive(Clone, Copy, Debug)]
pub struct L4Config {
    /// Chip children per worker rank (rank 0 has none).
    pub chips_per_rank: usize,
    /// How long rank 0 waits for any answer before it declares the rank lost.
    pub reply_timeout: Duration,
}

impl Default for L4Config {
    fn default() -> Self {
        Self {
            chips_per_rank: 1,
            reply_timeout: Duration::from_secs(20),
        }
    }
}

/// A buffer at level 4: the owning rank and the buffer's descriptor. The rank that acts on it
/// trusts only the descriptor's `owner_instance_id` (its own Worker's nonce), never `rank`.
#[derive(Clone, Copy, Debug)]
pub struct L4Buffer {
    /// The rank the buffer lives on.
    pub rank: usize,
    /// Its wire descriptor (no address).
    pub desc: BufferDescriptor,
}

impl L4Buffer {
    /// A tensor over the whole buffer, viewed as `shape` of `dtype`.
    pub fn tensor(
        &self,
        shape: &[u32],
        dtype: simpler_core::DataType,
    ) -> Result<simpler_core::ValidTensor, L4Error> {
        simpler_core::Tensor::row_major(self.desc, 0, shape, dtype)
            .map_err(|e| L4Error::L3(L3Error::Tensor(e)))
    }
}

/// Rank 0's handle on the job.
pub struct L4Worker {
    /// Dropping it calls MPI_Finalize, which is collective: with a rank lost it would wait for
    /// that rank forever, so then it is never dropped (see `Drop`).
    /// `Some` until `Drop` (taken there so it can be forgotten instead of dropped).
    universe: Option<mpi::environment::Universe>,
    pub(super) local: Worker,
    pub(super) callables: Callables,
    pub(super) config: L4Config,
    /// Every rank's Worker nonce, by rank.
    nonces: Vec<[u8; 8]>,
    /// Rank 0's own buffers, by identity.
    pub(super) buffers: HashMap<CanonicalIdentity, Buffer>,
    /// Set once a rank stops answering: the group is terminal.
    pub(super) lost: Option<usize>,
    closed: bool,
    pub(super) next_task: u64,
}

impl L4Worker {
    pub(super) fn new(
        universe: mpi::environment::Universe,
        local: Worker,
        callables: Callables,
        config: L4Config,
    ) -> Result<Self, L4Error> {
        let size = universe.world().size() as usize;
        let mut w = Self {
            universe: Some(universe),
            nonces: vec![local.owner_instance_id(); 1],
            local,
            callables,
            config,
            buffers: HashMap::new(),
            lost: None,
            closed: false,
            next_task: 1,
        };
        for r in 1..size {
            let n = w.expect_ok(r, "start-up")?;
            let nonce: [u8; 8] = n
                .as_slice()
                .try_into()
                .map_err(|_| L4Error::Mpi(format!("rank {r} sent a {}-byte nonce", n.len())))?;
            w.nonces.push(nonce);
        }
        let table = Command::Table(w.nonces.clone()).encode();
        for r in 1..size {
            w.world()
                .process_at_rank(r as i32)
                .send_with_tag(&table[..], TAG_CMD);
        }
        Ok(w)
    }

    /// MPI_COMM_WORLD (a handle, not stored: it must not outlive MPI_Finalize in `Drop`).
    pub(super) fn world(&self) -> SimpleCommunicator {
        self.universe
            .as_ref()
            .expect("the universe lives until Drop")
            .world()
    }

    /// Ranks in the job (rank 0 included).
    pub fn size(&self) -> usize {
        self.nonces.len()
    }

    /// The rank whose Worker minted `desc`, if any rank's did.
    pub fn owner_of(&self, desc: &BufferDescriptor) -> Option<usize> {
        let n = desc.identity.owner_instance_id;
        self.nonces.iter().position(|x| *x == n)
    }

    pub(super) fn alive(&self) -> Result<(), L4Error> {
        if self.closed {
            return Err(L4Error::GroupTerminal { lost: None });
        }
        match self.lost {
            Some(r) => Err(L4Error::GroupTerminal { lost: Some(r) }),
            None => Ok(()),
        }
    }

    pub(super) fn worker_rank(&self, rank: usize) -> Result<(), L4Error> {
        if rank == 0 || rank >= self.size() {
            return Err(L4Error::UnknownRank {
                rank,
                size: self.size(),
            });
        }
        Ok(())
    }

    pub(super) fn send(&self, rank: usize, cmd: &Command) {
        self.world()
            .process_at_rank(rank as i32)
            .send_with_tag(&cmd.encode()[..], TAG_CMD);
    }

    /// Receives the next message under `tag` from `rank`, or declares the rank lost once the
    /// reply timeout passes. MPI has no receive with a deadline, so this probes without
    /// blocking and yields the CPU between probes.
    pub(super) fn recv(&mut self, rank: usize, tag: i32, what: &str) -> Result<Vec<u8>, L4Error> {
        let deadline = Instant::now() + self.config.reply_timeout;
        let world = self.world();
        let p = world.process_at_rank(rank as i32);
        loop {
            if let Some((msg, status)) = p.immediate_matched_probe_with_tag(tag) {
                return Ok(receive_matched(msg, status));
            }
            if Instant::now() >= deadline {
                self.lost = Some(rank);
                return Err(L4Error::RankLost {
                    rank,
                    waiting_for: what.into(),
                });
            }
            std::thread::yield_now();
        }
    }

    /// Waits for `rank`'s next reply and returns its payload, or its refusal as an error.
    pub(super) fn expect_ok(&mut self, rank: usize, what: &str) -> Result<Vec<u8>, L4Error> {
        let msg = self.recv(rank, TAG_REPLY, what)?;
        let (_, r) = decode_reply(&msg).map_err(|error| L4Error::Rank { rank, error })?;
        r.map_err(|error| L4Error::Rank { rank, error })
    }

    /// Creates an `nbytes` POSIX_SHM buffer on `rank` (rank 0 included) granting `access`.
    pub fn create_buffer(
        &mut self,
        rank: usize,
        nbytes: u64,
        access: AccessMode,
    ) -> Result<L4Buffer, L4Error> {
        self.alive()?;
        if rank == 0 {
            let b = self
                .local
                .create_buffer(nbytes, access, BackendKind::PosixShm)?;
            let desc = b.descriptor()?;
            self.buffers.insert(desc.identity, b);
            return Ok(L4Buffer { rank, desc });
        }
        self.worker_rank(rank)?;
        self.send(
            rank,
            &Command::Create {
                nbytes,
                access: access as u8,
            },
        );
        let d = self.expect_ok(rank, "create_buffer")?;
        if d.len() != std::mem::size_of::<BufferDescriptor>() {
            return Err(L4Error::Mpi(format!(
                "rank {rank} sent a {}-byte descriptor",
                d.len()
            )));
        }
        Ok(L4Buffer {
            rank,
            desc: bytemuck::pod_read_unaligned(&d),
        })
    }

    /// The rank-0 buffer `b` names, after checking it is one, live and unchanged.
    pub(super) fn local_buffer(&self, b: &L4Buffer) -> Result<&Buffer, L4Error> {
        let reason = |r: String| L4Error::LocalEnd { reason: r };
        if b.rank != 0 || b.desc.identity.owner_instance_id != self.nonces[0] {
            return Err(reason(format!(
                "the buffer belongs to rank {}, not rank 0",
                self.owner_of(&b.desc)
                    .map_or("(none)".into(), |r| r.to_string())
            )));
        }
        let live = self
            .buffers
            .get(&b.desc.identity)
            .ok_or_else(|| reason(format!("buffer {} is not live", b.desc.identity.buffer_id)))?;
        let fields = differing_fields(&live.descriptor()?, &b.desc);
        if !fields.is_empty() {
            return Err(reason(format!(
                "descriptor differs in {}",
                fields.join(", ")
            )));
        }
        Ok(live)
    }

    /// Writes `values` into rank-0 buffer `b` at byte `offset`.
    pub fn write_f32s(&self, b: &L4Buffer, offset: u64, values: &[f32]) -> Result<(), L4Error> {
        Ok(self.local_buffer(b)?.write_f32s(offset, values)?)
    }

    /// Reads `n` f32 values from rank-0 buffer `b` at byte `offset`.
    pub fn read_f32s(&self, b: &L4Buffer, offset: u64, n: usize) -> Result<Vec<f32>, L4Error> {
        Ok(self.local_buffer(b)?.read_f32s(offset, n)?)
    }

    fn check_local_range(&self, b: &L4Buffer, len: u64) -> Result<&Buffer, L4Error> {
        let buf = self.local_buffer(b)?;
        if len > buf.nbytes() {
            return Err(L4Error::Range {
                offset: 0,
                len,
                nbytes: buf.nbytes(),
            });
        }
        Ok(buf)
    }

    /// Copies the first `nbytes` of rank-0 buffer `src` into remote buffer `dst`. Rank 0 checks
    /// `src`, the owning rank checks `dst`, and only then do the bytes move.
    pub fn copy_to(&mut self, dst: &L4Buffer, src: &L4Buffer, nbytes: u64) -> Result<(), L4Error> {
        self.alive()?;
        let mut data = vec![0u8; nbytes as usize];
        self.check_local_range(src, nbytes)?.read(0, &mut data)?;
        self.worker_rank(dst.rank)?;
        self.send(
            dst.rank,
            &Command::CopyIn {
                desc: dst.desc,
                offset: 0,
                len: nbytes,
            },
        );
        self.expect_ok(dst.rank, "copy_to: the destination check")?;
        self.world()
            .process_at_rank(dst.rank as i32)
            .send_with_tag(&data[..], TAG_DATA);
        self.expect_ok(dst.rank, "copy_to: the write").map(drop)
    }

    /// Copies the first `nbytes` of remote buffer `src` into rank-0 buffer `dst`, both ends
    /// checked before a byte moves.
    pub fn copy_from(
        &mut self,
        dst: &L4Buffer,
        src: &L4Buffer,
        nbytes: u64,
    ) -> Result<(), L4Error> {
        self.alive()?;
        self.check_local_range(dst, nbytes)?;
        self.worker_rank(src.rank)?;
        self.send(
            src.rank,
            &Command::CopyOut {
                desc: src.desc,
                offset: 0,
                len: nbytes,
            },
        );
        self.expect_ok(src.rank, "copy_from: the source check")?;
        let data = self.recv(src.rank, TAG_DATA, "copy_from: the bytes")?;
        if data.len() as u64 != nbytes {
            return Err(L4Error::Rank {
                rank: src.rank,
                error: RankError::BadCommand {
                    reason: format!("{} bytes arrived, {nbytes} asked", data.len()),
                },
            });
        }
        self.check_local_range(dst, nbytes)?.write(0, &data)?;
        Ok(())
    }

    /// Test hook: tells `rank` to end at once, as a crashed host would.
    #[doc(hidden)]
    pub fn kill_rank(&mut self, rank: usize) -> Result<(), L4Error> {
        self.worker_rank(rank)?;
        self.send(rank, &Command::Die);
        Ok(())
    }

    /// Shuts every rank down (a lost rank is skipped: nothing answers there) and closes rank
    /// 0's Worker. Each rank's answer is awaited for at most the reply timeout. Returns the
    /// first failure; calling it again does nothing.
    pub fn close(&mut self) -> Result<(), L4Error> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let mut first = None;
        for r in 1..self.size() {
            if self.lost == Some(r) {
                continue;
            }
            self.send(r, &Command::Shutdown);
            if let Err(e) = self.expect_ok(r, "shutdown") {
                first.get_or_insert(e);
            }
        }
        self.buffers.clear();
        if let Err(e) = self.local.close(Duration::from_secs(10)) {
            first.get_or_insert(L4Error::L3(e));
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for L4Worker {
    fn drop(&mut self) {
        // Best effort: a worker rank left waiting in its receive would keep mpirun alive.
        let _ = self.close();
        let universe = self.universe.take();
        if self.lost.is_some() {
            // With a rank lost, MPI_Finalize would block on it: the process leaves MPI
            // without finalizing (mpirun then reports the job as ended abnormally, which it
            // was).
            std::mem::forget(universe);
        }
    }
}

/// Receives a probed message whole (rsmpi 0.8 has no `matched_receive_vec`): the probe's status
/// gives its length.
pub(super) fn receive_matched(
    msg: mpi::point_to_point::Message,
    status: mpi::point_to_point::Status,
) -> Vec<u8> {
    let n = status.count(u8::equivalent_datatype()).max(0) as usize;
    let mut v = vec![0u8; n];
    msg.matched_receive_into(&mut v[..]);
    v
}
