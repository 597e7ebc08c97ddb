//! Start-up of every rank, and what a worker rank runs: a loop serving rank 0's commands on its
//! one MPI thread, over its own L3 Worker.

use super::reaper::Reaper;
use super::wire::{encode_reply, Command, RankError, TAG_CMD, TAG_DATA, TAG_REPLY};
use super::worker::{Callables, L4Config, L4Worker, RankSetup};
use super::L4Error;
use crate::l3::import::differing_fields;
use crate::l3::{shm_prefix, Buffer, Worker, WorkerConfig};
use crate::task_args::TaskArgs;
use crate::ErrorChain;
use mpi::traits::*;
use simpler_core::blob::read_blob;
use simpler_core::mailbox::CallConfig;
use simpler_core::{AccessMode, BackendKind, BufferDescriptor, CanonicalIdentity, TensorArgType};
use std::collections::HashMap;
use std::time::Duration;

/// What [`start`] made of this process.
// The orchestrator is the one value of its kind per process, so its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Role {
    /// Rank 0: the orchestrator.
    Orchestrator(L4Worker),
    /// A worker rank that served rank 0 until it was told to shut down.
    Served {
        /// This rank.
        rank: usize,
    },
}

/// Starts this rank: builds and forks its L3 Worker (callables from `setup`, the same on every
/// rank so that an [`super::L4Callable`] index means the same callable everywhere), then
/// initializes MPI. Rank 0 gets its [`L4Worker`]; a worker rank serves until shutdown and
/// returns [`Role::Served`].
pub fn start(setup: RankSetup, config: L4Config) -> Result<Role, L4Error> {
    // The rank before MPI_Init, so the Worker's children are forked before any MPI state
    // exists (a forked child of an initialized MPI process is unsupported by Open MPI).
    let rank: usize = std::env::var("OMPI_COMM_WORLD_RANK")
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| L4Error::Mpi("OMPI_COMM_WORLD_RANK is not set: run under mpirun".into()))?;
    let chips = if rank == 0 { 0 } else { config.chips_per_rank };
    let reaper = Reaper::start()?;
    let mut worker = Worker::new(WorkerConfig::new(chips, 1))?;
    let callables = setup(&mut worker)?;
    worker.init()?;
    // The nonce is minted by `init`: only now is the prefix the Worker's names take known.
    reaper.watch(&shm_prefix(&worker.owner_instance_id()))?;
    let universe = mpi::initialize().ok_or_else(|| L4Error::Mpi("MPI_Init failed".into()))?;
    let world = universe.world();
    if world.rank() as usize != rank {
        return Err(L4Error::Mpi(format!(
            "OMPI_COMM_WORLD_RANK says {rank}, MPI says {}",
            world.rank()
        )));
    }
    if world.size() < 2 {
        return Err(L4Error::Mpi(
            "level 4 needs at least 2 ranks (rank 0 orchestrates)".into(),
        ));
    }
    if rank == 0 {
        return L4Worker::new(universe, worker, callables, config).map(Role::Orchestrator);
    }
    let root = world.process_at_rank(0);
    let nonce = worker.owner_instance_id();
    root.send_with_tag(&encode_reply(0, &Ok(nonce.to_vec()))[..], TAG_REPLY);
    let mut served = Served {
        rank,
        worker,
        callables,
        table: Vec::new(),
        buffers: HashMap::new(),
    };
    loop {
        let (msg, _) = root.receive_vec_with_tag::<u8>(TAG_CMD);
        let reply = |task: u64, r: Result<Vec<u8>, RankError>| {
            root.send_with_tag(&encode_reply(task, &r)[..], TAG_REPLY);
        };
        match Command::decode(&msg) {
            Err(e) => reply(0, Err(e)),
            Ok(Command::Table(t)) => served.table = t,
            Ok(Command::Create { nbytes, access }) => reply(0, served.create(nbytes, access)),
            Ok(Command::Run {
                task,
                kind,
                callable,
                tags,
                blob,
            }) => reply(task, served.run(kind, callable, &tags, &blob)),
            Ok(Command::CopyIn { desc, offset, len }) => match served.check(&desc, offset, len) {
                Err(e) => reply(0, Err(e)),
                Ok(buffer) => {
                    reply(0, Ok(Vec::new()));
                    let (data, _) = root.receive_vec_with_tag::<u8>(TAG_DATA);
                    let r = if data.len() as u64 != len {
                        Err(RankError::BadCommand {
                            reason: format!("{} bytes arrived, {len} announced", data.len()),
                        })
                    } else {
                        buffer.write(offset, &data).map_err(l3_error)
                    };
                    reply(0, r.map(|()| Vec::new()));
                }
            },
            Ok(Command::CopyOut { desc, offset, len }) => {
                let out = served.check(&desc, offset, len).and_then(|b| {
                    let mut data = vec![0u8; len as usize];
                    b.read(offset, &mut data).map_err(l3_error)?;
                    Ok(data)
                });
                match out {
                    Err(e) => reply(0, Err(e)),
                    Ok(data) => {
                        reply(0, Ok(Vec::new()));
                        root.send_with_tag(&data[..], TAG_DATA);
                    }
                }
            }
            Ok(Command::Shutdown) => {
                served.buffers.clear();
                let r = served
                    .worker
                    .close(Duration::from_secs(10))
                    .map_err(l3_error);
                reply(0, r.map(|()| Vec::new()));
                break;
            }
            // The test of a lost host: SIGKILL, so no reply and no cleanup (the L3 children
            // ask for SIGKILL when their parent dies).
            Ok(Command::Die) => crate::os::kill(std::process::id() as i32),
        }
    }
    Ok(Role::Served { rank })
}

fn l3_error(e: crate::l3::L3Error) -> RankError {
    RankError::L3 {
        message: ErrorChain(&e).to_string(),
    }
}

/// A worker rank's state between commands.
struct Served {
    rank: usize,
    worker: Worker,
    callables: Callables,
    /// Every rank's Worker nonce, by rank: how a descriptor names its owning rank.
    table: Vec<[u8; 8]>,
    /// The buffers this rank created for rank 0, by identity.
    buffers: HashMap<CanonicalIdentity, Buffer>,
}

impl Served {
    fn create(&mut self, nbytes: u64, access: u8) -> Result<Vec<u8>, RankError> {
        let access = AccessMode::from_raw(access).ok_or_else(|| RankError::BadCommand {
            reason: format!("access mode {access}"),
        })?;
        let b = self
            .worker
            .create_buffer(nbytes, access, BackendKind::PosixShm)
            .map_err(l3_error)?;
        let desc = b.descriptor().map_err(l3_error)?;
        self.buffers.insert(desc.identity, b);
        Ok(bytemuck::bytes_of(&desc).to_vec())
    }

    /// Resolves `desc` to one of this rank's live buffers and checks `[offset, offset + len)`
    /// lies inside it. Another rank's descriptor is refused naming its owner.
    fn check(&self, desc: &BufferDescriptor, offset: u64, len: u64) -> Result<&Buffer, RankError> {
        let nonce = desc.identity.owner_instance_id;
        if nonce != self.worker.owner_instance_id() {
            return Err(RankError::ForeignRank {
                owner: self.table.iter().position(|n| *n == nonce),
                here: self.rank,
            });
        }
        let b = self
            .buffers
            .get(&desc.identity)
            .ok_or(RankError::UnknownBuffer {
                buffer_id: desc.identity.buffer_id,
            })?;
        let live = b.descriptor().map_err(l3_error)?;
        let fields = differing_fields(&live, desc);
        if !fields.is_empty() {
            return Err(RankError::DescriptorMismatch {
                fields: fields.join(", "),
            });
        }
        if offset
            .checked_add(len)
            .map_or(true, |end| end > live.nbytes)
        {
            return Err(RankError::Range {
                offset,
                len,
                nbytes: live.nbytes,
            });
        }
        Ok(b)
    }

    /// Runs one task as one L3 run: every tensor must name a live buffer of this rank.
    fn run(&self, kind: u8, callable: u32, tags: &[u8], blob: &[u8]) -> Result<Vec<u8>, RankError> {
        let view = read_blob(blob).map_err(|e| RankError::BadCommand {
            reason: format!("task arguments: {}", ErrorChain(&e)),
        })?;
        let mut args = TaskArgs::from_blob(&view).map_err(|e| RankError::BadCommand {
            reason: format!("task arguments: {}", ErrorChain(&e)),
        })?;
        if tags.len() != args.tensor_count() {
            return Err(RankError::BadCommand {
                reason: format!("{} tags for {} tensors", tags.len(), args.tensor_count()),
            });
        }
        for (i, &raw) in tags.iter().enumerate() {
            let tag = TensorArgType::from_raw(raw as i32).ok_or_else(|| RankError::BadCommand {
                reason: format!("tag {raw}"),
            })?;
            args.set_tag(i, tag).map_err(|e| RankError::BadCommand {
                reason: ErrorChain(&e).to_string(),
            })?;
        }
        for t in args.tensors() {
            self.check(&t.buffer, 0, 0)?;
        }
        let cfg: CallConfig = bytemuck::Zeroable::zeroed();
        let r = match kind {
            0 => {
                let c = *self.callables.chip.get(callable as usize).ok_or_else(|| {
                    RankError::BadCommand {
                        reason: format!("no chip callable {callable}"),
                    }
                })?;
                self.worker
                    .run(|o| o.submit_next_level(0, c, &args, &cfg).map(drop))
            }
            1 => {
                let c = *self.callables.sub.get(callable as usize).ok_or_else(|| {
                    RankError::BadCommand {
                        reason: format!("no SUB callable {callable}"),
                    }
                })?;
                self.worker.run(|o| o.submit_sub(c, &args).map(drop))
            }
            2 => {
                let f = self.callables.orch.get(callable as usize).ok_or_else(|| {
                    RankError::BadCommand {
                        reason: format!("no rank orchestration {callable}"),
                    }
                })?;
                self.worker.run(|o| f(o, &args))
            }
            other => {
                return Err(RankError::BadCommand {
                    reason: format!("callable kind {other}"),
                })
            }
        };
        r.map(|_| Vec::new()).map_err(|e| RankError::Task {
            message: ErrorChain(&e).to_string(),
        })
    }
}
