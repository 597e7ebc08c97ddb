//! The messages between rank 0 and a worker rank, and their byte encoding.
//!
//! Every message is a byte vector under one of three MPI tags: commands (rank 0 to a rank),
//! replies (a rank to rank 0: a status byte, the task id the reply is for, a payload) and the
//! bulk bytes of a copy. A reply's error is a [`RankError`], so a refusal stays typed across the
//! host boundary. Integers are little-endian; nothing here is an address.

use simpler_core::BufferDescriptor;
use std::fmt;

/// Commands, rank 0 to a worker rank.
pub(super) const TAG_CMD: i32 = 1;
/// The bytes of a copy, after both ends accepted it.
pub(super) const TAG_DATA: i32 = 2;
/// Replies, a worker rank to rank 0.
pub(super) const TAG_REPLY: i32 = 3;

/// Why a worker rank refused a command (or how its task failed), as it travels back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RankError {
    /// The descriptor names a buffer another rank owns (`owner` is `None` if its nonce belongs
    /// to no rank of the job).
    ForeignRank {
        /// The owning rank, by the descriptor's `owner_instance_id`.
        owner: Option<usize>,
        /// The rank that refused it.
        here: usize,
    },
    /// The descriptor names this rank's Worker but no live buffer of it.
    UnknownBuffer {
        /// The buffer id it names.
        buffer_id: u64,
    },
    /// The descriptor differs from the live buffer's in these fields.
    DescriptorMismatch {
        /// The differing fields, comma-separated.
        fields: String,
    },
    /// A copy outside the buffer.
    Range {
        /// The access's first byte.
        offset: u64,
        /// Bytes it covers.
        len: u64,
        /// The buffer's size.
        nbytes: u64,
    },
    /// A message that does not decode.
    BadCommand {
        /// What is wrong with it.
        reason: String,
    },
    /// The L3 run of the task failed on the rank.
    Task {
        /// The L3 error, rendered.
        message: String,
    },
    /// Another L3 call on the rank failed.
    L3 {
        /// The L3 error, rendered.
        message: String,
    },
}

impl fmt::Display for RankError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ForeignRank {
                owner: Some(o),
                here,
            } => write!(f, "the buffer belongs to rank {o}, not rank {here}"),
            Self::ForeignRank { owner: None, here } => {
                write!(
                    f,
                    "the buffer belongs to no rank of this job (asked rank {here})"
                )
            }
            Self::UnknownBuffer { buffer_id } => {
                write!(f, "buffer {buffer_id} is not a live buffer of this rank")
            }
            Self::DescriptorMismatch { fields } => {
                write!(
                    f,
                    "the descriptor differs from the live buffer's in {fields}"
                )
            }
            Self::Range {
                offset,
                len,
                nbytes,
            } => write!(
                f,
                "access of {len} bytes at {offset} is outside the buffer's {nbytes}"
            ),
            Self::BadCommand { reason } => write!(f, "bad command: {reason}"),
            Self::Task { message } => write!(f, "task failed: {message}"),
            Self::L3 { message } => write!(f, "level 3: {message}"),
        }
    }
}

impl std::error::Error for RankError {}

/// A command to a worker rank.
#[derive(Debug)]
pub(super) enum Command {
    /// Every rank's Worker nonce, by rank (sent once, after start-up).
    Table(Vec<[u8; 8]>),
    /// Create a POSIX_SHM buffer on the rank's Worker.
    Create { nbytes: u64, access: u8 },
    /// Run one task as one L3 run.
    Run {
        task: u64,
        /// 0: a chip callable (on chip 0 of the rank), 1: a SUB callable, 2: a rank
        /// orchestration.
        kind: u8,
        callable: u32,
        /// The tags, one raw `TensorArgType` per tensor (tags do not travel in the blob).
        tags: Vec<u8>,
        blob: Vec<u8>,
    },
    /// Bytes into a buffer of the rank; a DATA message follows once the rank accepts.
    CopyIn {
        desc: BufferDescriptor,
        offset: u64,
        len: u64,
    },
    /// Bytes out of a buffer of the rank; the rank sends a DATA message after accepting.
    CopyOut {
        desc: BufferDescriptor,
        offset: u64,
        len: u64,
    },
    /// Close the Worker and leave the loop.
    Shutdown,
    /// Test hook: the rank ends at once (abort), as a crashed host would.
    Die,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RankError> {
        if self.0.len() < n {
            return Err(RankError::BadCommand {
                reason: format!("short message: {n} bytes wanted, {} left", self.0.len()),
            });
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, RankError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, RankError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, RankError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, RankError> {
        let n = self.u64()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, RankError> {
        Ok(String::from_utf8_lossy(&self.bytes()?).into_owned())
    }
    fn desc(&mut self) -> Result<BufferDescriptor, RankError> {
        let n = std::mem::size_of::<BufferDescriptor>();
        Ok(bytemuck::pod_read_unaligned(self.take(n)?))
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

impl Command {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Self::Table(nonces) => {
                out.push(1);
                out.extend_from_slice(&(nonces.len() as u64).to_le_bytes());
                for n in nonces {
                    out.extend_from_slice(n);
                }
            }
            Self::Create { nbytes, access } => {
                out.push(2);
                out.extend_from_slice(&nbytes.to_le_bytes());
                out.push(*access);
            }
            Self::Run {
                task,
                kind,
                callable,
                tags,
                blob,
            } => {
                out.push(3);
                out.extend_from_slice(&task.to_le_bytes());
                out.push(*kind);
                out.extend_from_slice(&callable.to_le_bytes());
                put_bytes(&mut out, tags);
                put_bytes(&mut out, blob);
            }
            Self::CopyIn { desc, offset, len } | Self::CopyOut { desc, offset, len } => {
                out.push(if matches!(self, Self::CopyIn { .. }) {
                    4
                } else {
                    5
                });
                out.extend_from_slice(bytemuck::bytes_of(desc));
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            Self::Shutdown => out.push(6),
            Self::Die => out.push(7),
        }
        out
    }

    pub(super) fn decode(msg: &[u8]) -> Result<Self, RankError> {
        let mut r = Reader(msg);
        Ok(match r.u8()? {
            1 => {
                let n = r.u64()? as usize;
                let mut v = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    v.push(r.take(8)?.try_into().expect("8 bytes"));
                }
                Self::Table(v)
            }
            2 => Self::Create {
                nbytes: r.u64()?,
                access: r.u8()?,
            },
            3 => Self::Run {
                task: r.u64()?,
                kind: r.u8()?,
                callable: r.u32()?,
                tags: r.bytes()?,
                blob: r.bytes()?,
            },
            k @ (4 | 5) => {
                let (desc, offset, len) = (r.desc()?, r.u64()?, r.u64()?);
                if k == 4 {
                    Self::CopyIn { desc, offset, len }
                } else {
                    Self::CopyOut { desc, offset, len }
                }
            }
            6 => Self::Shutdown,
            7 => Self::Die,
            k => {
                return Err(RankError::BadCommand {
                    reason: format!("unknown command {k}"),
                })
            }
        })
    }
}

/// A reply: the task (0 for a control command) and its outcome with its payload.
pub(super) fn encode_reply(task: u64, result: &Result<Vec<u8>, RankError>) -> Vec<u8> {
    let mut out = Vec::new();
    match result {
        Ok(payload) => {
            out.push(0);
            out.extend_from_slice(&task.to_le_bytes());
            out.extend_from_slice(payload);
        }
        Err(e) => {
            out.push(1);
            out.extend_from_slice(&task.to_le_bytes());
            let (code, a, b, c, s): (u8, u64, u64, u64, &str) = match e {
                RankError::ForeignRank { owner, here } => {
                    (1, owner.map_or(u64::MAX, |o| o as u64), *here as u64, 0, "")
                }
                RankError::UnknownBuffer { buffer_id } => (2, *buffer_id, 0, 0, ""),
                RankError::DescriptorMismatch { fields } => (3, 0, 0, 0, fields),
                RankError::Range {
                    offset,
                    len,
                    nbytes,
                } => (4, *offset, *len, *nbytes, ""),
                RankError::BadCommand { reason } => (5, 0, 0, 0, reason),
                RankError::Task { message } => (6, 0, 0, 0, message),
                RankError::L3 { message } => (7, 0, 0, 0, message),
            };
            out.push(code);
            for x in [a, b, c] {
                out.extend_from_slice(&x.to_le_bytes());
            }
            put_bytes(&mut out, s.as_bytes());
        }
    }
    out
}

/// Decodes a reply into its task id and outcome.
pub(super) fn decode_reply(msg: &[u8]) -> Result<(u64, Result<Vec<u8>, RankError>), RankError> {
    let mut r = Reader(msg);
    let status = r.u8()?;
    let task = r.u64()?;
    if status == 0 {
        return Ok((task, Ok(r.0.to_vec())));
    }
    let code = r.u8()?;
    let (a, b, c) = (r.u64()?, r.u64()?, r.u64()?);
    let s = r.string()?;
    let e = match code {
        1 => RankError::ForeignRank {
            owner: (a != u64::MAX).then_some(a as usize),
            here: b as usize,
        },
        2 => RankError::UnknownBuffer { buffer_id: a },
        3 => RankError::DescriptorMismatch { fields: s },
        4 => RankError::Range {
            offset: a,
            len: b,
            nbytes: c,
        },
        5 => RankError::BadCommand { reason: s },
        6 => RankError::Task { message: s },
        _ => RankError::L3 { message: s },
    };
    Ok((task, Err(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_round_trip_typed() {
        for e in [
            RankError::ForeignRank {
                owner: Some(2),
                here: 1,
            },
            RankError::ForeignRank {
                owner: None,
                here: 1,
            },
            RankError::UnknownBuffer { buffer_id: 7 },
            RankError::Range {
                offset: 1,
                len: 2,
                nbytes: 3,
            },
            RankError::Task {
                message: "boom".into(),
            },
        ] {
            let (task, back) = decode_reply(&encode_reply(9, &Err(e.clone()))).unwrap();
            assert_eq!(task, 9);
            assert_eq!(back, Err(e));
        }
    }

    #[test]
    fn truncated_command_is_refused() {
        let mut m = Command::Create {
            nbytes: 4,
            access: 2,
        }
        .encode();
        m.pop();
        assert!(matches!(
            Command::decode(&m),
            Err(RankError::BadCommand { .. })
        ));
        assert!(matches!(
            Command::decode(&[99]),
            Err(RankError::BadCommand { .. })
        ));
    }
}
