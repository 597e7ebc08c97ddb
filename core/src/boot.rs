//! The firmware's boot table and the core register block: what a loader hands the AICPU and
//! AICore images at entry, so no address is a constant in the firmware's code.
//!
//! Each AICore has a register block of [`REG_BLOCK_BYTES`] (its handshake registers and the PMU
//! block beside them). The AICPU writes a core's task register at [`REG_TASK`] (the
//! reference's `DATA_MAIN_BASE`); the core writes its status register at [`REG_STATUS`] (the
//! reference's `COND`). Both are 32-bit registers, accessed with volatile 32-bit loads and
//! stores. A core's dispatch payloads and its error words are not registers: they sit in a
//! [`CoreMailbox`] in memory the boot table names.
//!
//! The loader writes one [`BootTable`] and passes its address in `x0` to every CPU it starts.
//! Everything the firmware keeps lives in the regions it names: no allocator, no static
//! buffers sized in the code.

use crate::handshake::DispatchPayload;
use bytemuck::{Pod, Zeroable};

/// Bytes between consecutive cores' register blocks (the handshake registers and the PMU
/// block).
pub const REG_BLOCK_BYTES: u64 = 0x1400;
/// Offset of the task register (AICPU → AICore; `DATA_MAIN_BASE`) in a core's block.
pub const REG_TASK: u64 = 0xA0;
/// Offset of the status register (AICore → AICPU; `COND`) in a core's block.
pub const REG_STATUS: u64 = 0x4C8;
/// Offset of the PMU block in a core's register block (cycle and instruction counters the
/// firmware leaves to profiling).
pub const REG_PMU: u64 = 0x500;

/// `BootTable::magic`: "SIMPLRFW" read as a little-endian word.
pub const BOOT_MAGIC: u64 = u64::from_le_bytes(*b"SIMPLRFW");
/// The boot table layout this firmware reads.
pub const BOOT_VERSION: u32 = 2;

/// A region of memory: its first byte and its length.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct Region {
    /// Address of the first byte.
    pub base: u64,
    /// Bytes in the region.
    pub bytes: u64,
}

crate::assert_layout!(Region, size = 16, { base: 0, bytes: 8 });

impl Region {
    /// One past the last byte, `None` when it would wrap.
    pub const fn end(&self) -> Option<u64> {
        self.base.checked_add(self.bytes)
    }

    /// Whether `[addr, addr + len)` lies inside the region.
    pub const fn contains(&self, addr: u64, len: u64) -> bool {
        match (addr.checked_add(len), self.end()) {
            (Some(e), Some(end)) => addr >= self.base && e <= end,
            _ => false,
        }
    }

    /// Whether the two regions share a byte (an empty region shares none).
    pub const fn overlaps(&self, other: &Region) -> bool {
        match (self.end(), other.end()) {
            (Some(a), Some(b)) => {
                self.bytes != 0 && other.bytes != 0 && self.base < b && other.base < a
            }
            _ => true,
        }
    }
}

/// One core's mailbox: its two dispatch payloads (chosen by the token's parity) and the error
/// words it writes before a failed FIN. Written by the AICPU (payloads) and the core (error
/// words); the register handshake orders both.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct CoreMailbox {
    /// The payloads of even and odd tokens.
    pub payloads: [DispatchPayload; 2],
    /// The error code of the core's last task (`handshake::NO_ERROR` for none).
    pub error_code: u32,
    /// The detail word of that error.
    pub error_detail: u32,
}

crate::assert_layout!(CoreMailbox, size = 2 * 4248 + 8, {
    payloads: 0,
    error_code: 8496,
    error_detail: 8500,
});

/// What the loader hands the firmware: where every register block, mailbox, buffer and working
/// region is. Plain data at an address passed in `x0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BootTable {
    /// [`BOOT_MAGIC`].
    pub magic: u64,
    /// [`BOOT_VERSION`].
    pub version: u32,
    /// AICores the table describes (register blocks, mailboxes and local buffers each).
    pub cores: u32,
    /// The first core's register block; core `i`'s is `reg_stride * i` further.
    pub reg_base: u64,
    /// Bytes between register blocks ([`REG_BLOCK_BYTES`] on the chips this knows).
    pub reg_stride: u64,
    /// The cores' mailboxes, one [`CoreMailbox`] each, back to back (8-byte aligned).
    pub mailboxes: Region,
    /// The cores' local buffers, `local_words` f32 words each, back to back.
    pub locals: Region,
    /// f32 words of one core's local buffer.
    pub local_words: u64,
    /// Device memory (GM): every tensor address a run names lies in it.
    pub gm: Region,
    /// The AICPU's working memory: the runtime's shared state, the orchestrator, the task
    /// payloads and the entry arguments are carved from it (64-byte aligned).
    pub aicpu_work: Region,
    /// The run's entry arguments (`ChipStorageTaskArgs`) in GM.
    pub entry_args: Region,
    /// Which orchestration of the image's table the AICPU runs.
    pub orchestration: u32,
    /// Index of the first AICore in CPU numbering (MPIDR affinity 0): CPU `c` runs core
    /// `c - aicore_cpu_base`.
    pub aicore_cpu_base: u32,
    /// The CPU (MPIDR affinity 0) that runs the scheduler: the AICPU's own (0) when one CPU
    /// runs both the orchestration and the scheduler, another when the loader starts one for
    /// it (never an AICore's).
    pub scheduler_cpu: u32,
    /// Zero.
    pub reserved: u32,
}

crate::assert_layout!(BootTable, size = 136, {
    magic: 0,
    version: 8,
    cores: 12,
    reg_base: 16,
    reg_stride: 24,
    mailboxes: 32,
    locals: 48,
    local_words: 64,
    gm: 72,
    aicpu_work: 88,
    entry_args: 104,
    orchestration: 120,
    aicore_cpu_base: 124,
    scheduler_cpu: 128,
    reserved: 132,
});

/// Why a boot table was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootError {
    /// The magic word is not [`BOOT_MAGIC`].
    Magic(u64),
    /// The version is not [`BOOT_VERSION`].
    Version(u32),
    /// No cores, or more than the firmware can own.
    Cores {
        /// Cores the table names.
        cores: u32,
        /// The most the firmware owns.
        limit: u32,
    },
    /// The register stride is smaller than a register block.
    RegStride(u64),
    /// A region is too small for what the table says it holds, wraps, or is misaligned.
    Region {
        /// Which region, as its field is named.
        name: &'static str,
    },
    /// The scheduler's CPU is one of the AICores'.
    SchedulerCpu(u32),
    /// Two regions share memory.
    Overlap {
        /// The first region's field name.
        a: &'static str,
        /// The second region's field name.
        b: &'static str,
    },
}

impl core::fmt::Display for BootError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Magic(m) => write!(f, "boot table magic {m:#x} is not the firmware's"),
            Self::Version(v) => write!(
                f,
                "boot table version {v}, this firmware reads {BOOT_VERSION}"
            ),
            Self::Cores { cores, limit } => {
                write!(
                    f,
                    "{cores} cores named; the firmware owns from 1 to {limit}"
                )
            }
            Self::RegStride(s) => {
                write!(
                    f,
                    "register stride {s:#x} is below the block of {REG_BLOCK_BYTES:#x}"
                )
            }
            Self::Region { name } => {
                write!(f, "region `{name}` is too small, wraps or is misaligned")
            }
            Self::SchedulerCpu(c) => write!(f, "scheduler CPU {c} is an AICore's"),
            Self::Overlap { a, b } => write!(f, "regions `{a}` and `{b}` overlap"),
        }
    }
}

impl core::error::Error for BootError {}

impl BootTable {
    /// Core `i`'s register block address (`None` past the table's cores or on overflow).
    pub const fn reg_block(&self, i: u32) -> Option<u64> {
        if i >= self.cores {
            return None;
        }
        match self.reg_stride.checked_mul(i as u64) {
            Some(off) => self.reg_base.checked_add(off),
            None => None,
        }
    }

    /// Checks the table once, at boot, so that every address the firmware derives from it
    /// afterwards is in range: magic, version, a core count from 1 to `max_cores`, a stride
    /// that holds a block, a scheduler CPU that is no AICore's, regions large enough, aligned
    /// and disjoint.
    pub fn validate(&self, max_cores: u32) -> Result<(), BootError> {
        if self.magic != BOOT_MAGIC {
            return Err(BootError::Magic(self.magic));
        }
        if self.version != BOOT_VERSION {
            return Err(BootError::Version(self.version));
        }
        if self.cores == 0 || self.cores > max_cores {
            return Err(BootError::Cores {
                cores: self.cores,
                limit: max_cores,
            });
        }
        if self
            .scheduler_cpu
            .checked_sub(self.aicore_cpu_base)
            .is_some_and(|c| c < self.cores)
        {
            return Err(BootError::SchedulerCpu(self.scheduler_cpu));
        }
        if self.reg_stride < REG_BLOCK_BYTES || self.reg_base % 4 != 0 {
            return Err(BootError::RegStride(self.reg_stride));
        }
        let regs = Region {
            base: self.reg_base,
            bytes: self
                .reg_stride
                .checked_mul(self.cores as u64)
                .ok_or(BootError::Region { name: "reg_base" })?,
        };
        let n = self.cores as u64;
        let need = |r: &Region, name, bytes: Option<u64>, align: u64| {
            let ok = match bytes {
                Some(b) => r.bytes >= b && r.end().is_some() && r.base % align == 0,
                None => false,
            };
            if ok {
                Ok(())
            } else {
                Err(BootError::Region { name })
            }
        };
        need(&regs, "reg_base", regs.bytes.checked_add(0), 4)?;
        let mailbox = core::mem::size_of::<CoreMailbox>() as u64;
        need(&self.mailboxes, "mailboxes", mailbox.checked_mul(n), 8)?;
        let local = self.local_words.checked_mul(4);
        need(
            &self.locals,
            "locals",
            local.and_then(|l| l.checked_mul(n)),
            4,
        )?;
        need(&self.gm, "gm", Some(1), 8)?;
        need(&self.aicpu_work, "aicpu_work", Some(1), 64)?;
        if !self
            .gm
            .contains(self.entry_args.base, self.entry_args.bytes)
        {
            return Err(BootError::Region { name: "entry_args" });
        }
        let named = [
            (regs, "reg_base"),
            (self.mailboxes, "mailboxes"),
            (self.locals, "locals"),
            (self.gm, "gm"),
            (self.aicpu_work, "aicpu_work"),
        ];
        for (i, (a, an)) in named.iter().enumerate() {
            for (b, bn) in named.iter().skip(i + 1) {
                if a.overlaps(b) {
                    return Err(BootError::Overlap { a: an, b: bn });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> BootTable {
        let mailbox = core::mem::size_of::<CoreMailbox>() as u64;
        BootTable {
            magic: BOOT_MAGIC,
            version: BOOT_VERSION,
            cores: 2,
            reg_base: 0x1000_0000,
            reg_stride: REG_BLOCK_BYTES,
            mailboxes: Region {
                base: 0x2000_0000,
                bytes: 2 * mailbox,
            },
            locals: Region {
                base: 0x3000_0000,
                bytes: 2 * 4 * 1024,
            },
            local_words: 1024,
            gm: Region {
                base: 0x4000_0000,
                bytes: 1 << 20,
            },
            aicpu_work: Region {
                base: 0x5000_0000,
                bytes: 1 << 20,
            },
            entry_args: Region {
                base: 0x4000_0000,
                bytes: 64,
            },
            orchestration: 0,
            aicore_cpu_base: 1,
            scheduler_cpu: 0,
            reserved: 0,
        }
    }

    #[test]
    fn a_consistent_table_passes_and_names_each_block() {
        let t = table();
        assert_eq!(t.validate(4), Ok(()));
        assert_eq!(t.reg_block(1), Some(0x1000_0000 + 0x1400));
        assert_eq!(t.reg_block(2), None);
    }

    #[test]
    fn each_inconsistency_is_its_own_error() {
        let mut t = table();
        t.magic = 1;
        assert_eq!(t.validate(4), Err(BootError::Magic(1)));
        let mut t = table();
        t.version = 7;
        assert_eq!(t.validate(4), Err(BootError::Version(7)));
        let mut t = table();
        t.cores = 0;
        assert_eq!(t.validate(4), Err(BootError::Cores { cores: 0, limit: 4 }));
        assert_eq!(
            table().validate(1),
            Err(BootError::Cores { cores: 2, limit: 1 })
        );
        let mut t = table();
        t.scheduler_cpu = 2;
        assert_eq!(t.validate(4), Err(BootError::SchedulerCpu(2)));
        t.scheduler_cpu = 3;
        assert_eq!(t.validate(4), Ok(()), "past the two AICores (CPUs 1 and 2)");
        let mut t = table();
        t.reg_stride = 0x100;
        assert_eq!(t.validate(4), Err(BootError::RegStride(0x100)));
        let mut t = table();
        t.mailboxes.bytes -= 1;
        assert_eq!(t.validate(4), Err(BootError::Region { name: "mailboxes" }));
        let mut t = table();
        t.locals.base = u64::MAX - 8;
        assert_eq!(t.validate(4), Err(BootError::Region { name: "locals" }));
        let mut t = table();
        t.entry_args.base = 0x5000_0000;
        assert_eq!(t.validate(4), Err(BootError::Region { name: "entry_args" }));
        let mut t = table();
        t.aicpu_work.base = 0x4000_0040;
        assert_eq!(
            t.validate(4),
            Err(BootError::Overlap {
                a: "gm",
                b: "aicpu_work"
            })
        );
    }
}
