//! Moving a state built in one memory into another: the compact live image.
//!
//! The host-built-graph runtime (hbg) runs the orchestration on the host into a mirror of the
//! shared memory, then ships it. Only the live prefix of each array travels: per ring the flow
//! words, the claimed task slots and the used dependency cells, and per ready queue its header
//! and the queued cells. [`SchedState::export`] writes those, field by field, as little-endian
//! words into a caller's buffer (no padding, no addresses: the image is position-independent);
//! [`SchedState::import`] reads them back into a state that was [`SchedState::reset`]. Nothing
//! is reclaimed while a graph is built on the host, so every ring's live tasks are its first
//! `tasks[r]` slots (a build that wrapped a ring is refused).

use crate::edge::EdgeCell;
use crate::ready_queue::ReadyQueue;
use crate::ring::{RingFlow, MAX_RINGS};
use crate::sched::{SchedState, READY_QUEUES};
use crate::slot::SlotState;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// How much of each array a state uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tasks claimed per ring (slots `0..tasks[r]`).
    pub tasks: [u32; MAX_RINGS],
    /// Dependency cells used per ring (cells `0..edges[r]`).
    pub edges: [u32; MAX_RINGS],
    /// Values pushed per ready queue (none popped).
    pub queued: [u64; READY_QUEUES],
}

/// Why an image could not be written or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageError {
    /// The buffer is shorter than the image.
    Short {
        /// Bytes the image needs.
        needed: usize,
        /// Length of the buffer given.
        got: usize,
    },
    /// The usage exceeds the state's capacity, or a ring wrapped (tasks were retired while
    /// building), or a queue was popped.
    Usage {
        /// The name of the count or ring cursor at fault.
        field: &'static str,
        /// The value it has.
        value: u64,
    },
}

impl core::fmt::Display for ImageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Short { needed, got } => write!(
                f,
                "buffer of {got} bytes is too short: the image needs at least {needed}"
            ),
            Self::Usage { field, value } => write!(
                f,
                "image usage {field} = {value} is past the state's capacity, or the state \
                 retired tasks or popped a queue while it was built"
            ),
        }
    }
}

impl core::error::Error for ImageError {}

/// Sequential little-endian word writer over a caller's buffer.
pub struct Writer<'b> {
    buf: &'b mut [u8],
    at: usize,
}

/// Sequential little-endian word reader.
pub struct Reader<'b> {
    buf: &'b [u8],
    at: usize,
}

impl<'b> Writer<'b> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'b mut [u8]) -> Self {
        Self { buf, at: 0 }
    }

    /// Bytes written so far (the offset of the next word).
    pub fn len(&self) -> usize {
        self.at
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.at == 0
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), ImageError> {
        let end = self.at + bytes.len();
        let got = self.buf.len();
        let dst = self
            .buf
            .get_mut(self.at..end)
            .ok_or(ImageError::Short { needed: end, got })?;
        dst.copy_from_slice(bytes);
        self.at = end;
        Ok(())
    }
}

impl<'b> Reader<'b> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'b [u8]) -> Self {
        Self { buf, at: 0 }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], ImageError> {
        let end = self.at + N;
        let src = self.buf.get(self.at..end).ok_or(ImageError::Short {
            needed: end,
            got: self.buf.len(),
        })?;
        self.at = end;
        let mut out = [0u8; N];
        out.copy_from_slice(src);
        Ok(out)
    }
}

/// An atomic word that travels in an image.
trait Word {
    fn export(&self, w: &mut Writer<'_>) -> Result<(), ImageError>;
    fn import(&self, r: &mut Reader<'_>) -> Result<(), ImageError>;
}

impl Word for AtomicU32 {
    fn export(&self, w: &mut Writer<'_>) -> Result<(), ImageError> {
        w.put(&self.load(Ordering::Relaxed).to_le_bytes())
    }
    fn import(&self, r: &mut Reader<'_>) -> Result<(), ImageError> {
        self.store(u32::from_le_bytes(r.take()?), Ordering::Relaxed);
        Ok(())
    }
}

impl Word for AtomicU64 {
    fn export(&self, w: &mut Writer<'_>) -> Result<(), ImageError> {
        w.put(&self.load(Ordering::Relaxed).to_le_bytes())
    }
    fn import(&self, r: &mut Reader<'_>) -> Result<(), ImageError> {
        self.store(u64::from_le_bytes(r.take()?), Ordering::Relaxed);
        Ok(())
    }
}

/// A record of atomic words that travels field by field.
pub(crate) trait Record {
    /// Bytes one record takes in an image.
    const IMAGE_BYTES: usize;
    fn export(&self, w: &mut Writer<'_>) -> Result<(), ImageError>;
    fn import(&self, r: &mut Reader<'_>) -> Result<(), ImageError>;
}

/// Implements [`Record`] over the listed fields, in order, with their widths.
macro_rules! record {
    ($t:ty { $($field:ident : $width:literal),* $(,)? }) => {
        impl Record for $t {
            const IMAGE_BYTES: usize = 0 $(+ $width)*;
            fn export(&self, w: &mut Writer<'_>) -> Result<(), ImageError> {
                $( Word::export(&self.$field, w)?; )*
                Ok(())
            }
            fn import(&self, r: &mut Reader<'_>) -> Result<(), ImageError> {
                $( Word::import(&self.$field, r)?; )*
                Ok(())
            }
        }
    };
}

record!(RingFlow {
    current_task_index: 4,
    last_task_alive: 4,
    advance_requests: 4,
});
record!(SlotState {
    status: 4,
    fanout_lock: 4,
    fanout_count: 4,
    fanout_head: 4,
    fanout_refcount: 4,
    fanin_count: 4,
    fanin_refcount: 4,
    edge_start: 4,
    task_id: 8,
    edge_count: 4,
    shape: 4,
    completed_subtasks: 4,
    heap_end: 4,
    seen_epoch: 4,
    seen_edge: 4,
});
record!(EdgeCell {
    consumer: 4,
    producer: 4,
    next: 4,
    flags: 4,
});

impl SchedState<'_> {
    /// What this state uses, given the edge cells each ring's orchestrator used. Refused if a
    /// ring wrapped or a queue was popped (a state built with no scheduler running does
    /// neither).
    pub fn usage(&self, edges: [u32; MAX_RINGS]) -> Result<Usage, ImageError> {
        let mut u = Usage {
            edges,
            ..Usage::default()
        };
        for r in 0..MAX_RINGS {
            let flow = self.flow(r);
            let tasks = flow.current_task_index.load(Ordering::Acquire);
            if flow.last_task_alive.load(Ordering::Acquire) != 0 {
                return Err(ImageError::Usage {
                    field: "last_task_alive",
                    value: flow.last_task_alive.load(Ordering::Acquire) as u64,
                });
            }
            u.tasks[r] = tasks;
        }
        for q in 0..READY_QUEUES {
            let (pushed, popped) = self.queue(q).positions();
            if popped != 0 {
                return Err(ImageError::Usage {
                    field: "ready_queue.popped",
                    value: popped,
                });
            }
            u.queued[q] = pushed;
        }
        self.check_usage(&u)?;
        Ok(u)
    }

    fn check_usage(&self, u: &Usage) -> Result<(), ImageError> {
        for r in 0..MAX_RINGS {
            let ring = self.config().rings[r];
            if u.tasks[r] > ring.window {
                return Err(ImageError::Usage {
                    field: "tasks",
                    value: u.tasks[r] as u64,
                });
            }
            if u.edges[r] > ring.edges {
                return Err(ImageError::Usage {
                    field: "edges",
                    value: u.edges[r] as u64,
                });
            }
        }
        for q in 0..READY_QUEUES {
            if u.queued[q] > self.queue(q).capacity() as u64 {
                return Err(ImageError::Usage {
                    field: "queued",
                    value: u.queued[q],
                });
            }
        }
        Ok(())
    }

    /// Bytes the image of `usage` takes.
    pub fn image_size(usage: &Usage) -> usize {
        let mut n = MAX_RINGS * RingFlow::IMAGE_BYTES;
        for r in 0..MAX_RINGS {
            n += usage.tasks[r] as usize * SlotState::IMAGE_BYTES;
            n += usage.edges[r] as usize * EdgeCell::IMAGE_BYTES;
        }
        for q in 0..READY_QUEUES {
            n += 16 + usage.queued[q] as usize * 16;
        }
        n
    }

    /// Writes the live image of `usage` into `out`; returns its length.
    pub fn export(&self, usage: &Usage, out: &mut [u8]) -> Result<usize, ImageError> {
        self.check_usage(usage)?;
        let mut w = Writer::new(out);
        for r in 0..MAX_RINGS {
            self.flow(r).export(&mut w)?;
        }
        for r in 0..MAX_RINGS {
            for s in &self.slots_of(r)[..usage.tasks[r] as usize] {
                s.export(&mut w)?;
            }
            for e in &self.edges_of(r)[..usage.edges[r] as usize] {
                e.export(&mut w)?;
            }
        }
        for q in 0..READY_QUEUES {
            self.queue(q).export(usage.queued[q], &mut w)?;
        }
        Ok(w.len())
    }

    /// Reads an image written by [`Self::export`] for `usage` into this state, which must have
    /// been reset and must not be in use by another thread.
    pub fn import(&self, usage: &Usage, image: &[u8]) -> Result<(), ImageError> {
        self.check_usage(usage)?;
        let mut r = Reader::new(image);
        for ring in 0..MAX_RINGS {
            self.flow(ring).import(&mut r)?;
        }
        for ring in 0..MAX_RINGS {
            for s in &self.slots_of(ring)[..usage.tasks[ring] as usize] {
                s.import(&mut r)?;
            }
            for e in &self.edges_of(ring)[..usage.edges[ring] as usize] {
                e.import(&mut r)?;
            }
        }
        for q in 0..READY_QUEUES {
            self.queue(q).import(usage.queued[q], &mut r)?;
        }
        Ok(())
    }
}

impl ReadyQueue<'_> {
    fn export(&self, pushed: u64, w: &mut Writer<'_>) -> Result<(), ImageError> {
        let (enq, deq) = self.position_words();
        enq.export(w)?;
        deq.export(w)?;
        for p in 0..pushed {
            let (seq, value) = self.cell_words(p);
            seq.export(w)?;
            value.export(w)?;
        }
        Ok(())
    }

    fn import(&self, pushed: u64, r: &mut Reader<'_>) -> Result<(), ImageError> {
        let (enq, deq) = self.position_words();
        enq.import(r)?;
        deq.import(r)?;
        for p in 0..pushed {
            let (seq, value) = self.cell_words(p);
            seq.import(r)?;
            value.import(r)?;
        }
        Ok(())
    }
}

/// Exports and imports a plain array of atomic words (the AICPU's task payload records).
pub fn export_words(words: &[AtomicU64], w: &mut Writer<'_>) -> Result<(), ImageError> {
    for word in words {
        word.export(w)?;
    }
    Ok(())
}

/// Imports what [`export_words`] wrote.
pub fn import_words(words: &[AtomicU64], r: &mut Reader<'_>) -> Result<(), ImageError> {
    for word in words {
        word.import(r)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::RingConfig;
    use crate::sched::{SchedConfig, SchedStateLayout};
    use std::vec;

    fn layout() -> SchedStateLayout {
        SchedStateLayout::new(SchedConfig::uniform(RingConfig {
            window: 16,
            heap_bytes: 1 << 16,
            edges: 32,
        }))
        .unwrap()
    }

    #[test]
    fn an_imported_state_equals_the_exported_one() {
        let l = layout();
        let mut a = vec![crate::layout::Line([0; 64]); l.size() / 64 + 1];
        let mut b = a.clone();
        let sa = SchedState::init(bytemuck::cast_slice_mut(&mut a), &l).unwrap();
        let sb = SchedState::init(bytemuck::cast_slice_mut(&mut b), &l).unwrap();
        // A state with some tasks, edges and queued values, written field by field.
        sa.flow(0).current_task_index.store(3, Ordering::Relaxed);
        for (i, s) in sa.slots_of(0)[..3].iter().enumerate() {
            s.status.store(7 + i as u32, Ordering::Relaxed);
            s.task_id.store(100 + i as u64, Ordering::Relaxed);
            s.heap_end.store(1000 * i as u32, Ordering::Relaxed);
        }
        sa.edges_of(0)[0].producer.store(2, Ordering::Relaxed);
        sa.queue(1).push(0xABCD).unwrap();
        let u = sa.usage([1, 0, 0, 0]).unwrap();
        assert_eq!(u.tasks, [3, 0, 0, 0]);
        assert_eq!(u.queued, [0, 1, 0, 0]);
        let mut img = vec![0u8; SchedState::image_size(&u)];
        let n = sa.export(&u, &mut img).unwrap();
        assert_eq!(n, img.len());
        sb.reset();
        sb.import(&u, &img).unwrap();
        for i in 0..3 {
            let (x, y) = (&sa.slots_of(0)[i], &sb.slots_of(0)[i]);
            assert_eq!(
                x.status.load(Ordering::Relaxed),
                y.status.load(Ordering::Relaxed)
            );
            assert_eq!(
                x.task_id.load(Ordering::Relaxed),
                y.task_id.load(Ordering::Relaxed)
            );
            assert_eq!(
                x.heap_end.load(Ordering::Relaxed),
                y.heap_end.load(Ordering::Relaxed)
            );
        }
        assert_eq!(sb.flow(0).current_task_index.load(Ordering::Relaxed), 3);
        assert_eq!(sb.edges_of(0)[0].producer.load(Ordering::Relaxed), 2);
        assert_eq!(sb.queue(1).pop(), Some(0xABCD));
        assert_eq!(sb.queue(1).pop(), None);
    }

    #[test]
    fn short_buffers_and_overfull_usage_are_refused() {
        let l = layout();
        let mut a = vec![crate::layout::Line([0; 64]); l.size() / 64 + 1];
        let sa = SchedState::init(bytemuck::cast_slice_mut(&mut a), &l).unwrap();
        let u = sa.usage([0; MAX_RINGS]).unwrap();
        let need = SchedState::image_size(&u);
        let mut small = vec![0u8; need - 1];
        assert!(matches!(
            sa.export(&u, &mut small),
            Err(ImageError::Short { .. })
        ));
        let mut big = u;
        big.tasks[2] = 17;
        let mut img = vec![0u8; SchedState::image_size(&big)];
        assert_eq!(
            sa.export(&big, &mut img),
            Err(ImageError::Usage {
                field: "tasks",
                value: 17
            })
        );
        assert!(matches!(
            sa.import(&u, &img[..need - 1]),
            Err(ImageError::Short { .. })
        ));
    }
}
