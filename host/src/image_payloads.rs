//! hbg's payload records, written straight into the live image's format as the orchestration
//! submits (per record: task id, kernels, block count, counts, used tensors, used scalars, the
//! dispatch predicate if any; see
//! `TaskPayloads::import`), so a bind ships them as they are instead of exporting them from a
//! mirror of the device's records.
//!
//! A task the orchestration claims without a record (an allocation task, which no core runs)
//! gets an empty one when the next record of its ring is written, or when the image is taken.

use simpler_aicpu::payloads::{decode_counts, head_words, MixedKernels, PayloadSink, TENSOR_WORDS};
use simpler_core::orchestrator::TaskArg;
use simpler_core::predicate::DispatchPredicate;
use simpler_core::ring::MAX_RINGS;
use simpler_core::TaskId;
use std::cell::RefCell;

/// Words of a record before its body: task id, two kernel words, counts.
const PREFIX_WORDS: usize = 4;

#[derive(Default)]
struct Stream {
    /// The image, in words (the image is little-endian; so is every supported host).
    words: Vec<u64>,
    /// Per ring, where each task's record starts in `words`, by task order.
    starts: [Vec<usize>; MAX_RINGS],
}

/// The image of one bind's payload records; retained across binds, so a warm bind's writes
/// allocate nothing once it has held the largest graph.
#[derive(Default)]
pub(crate) struct ImagePayloads {
    stream: RefCell<Stream>,
}

impl Stream {
    /// Appends empty records for `ring`'s tasks before `local` that have none.
    fn fill(&mut self, ring: usize, local: u32) {
        while self.starts[ring].len() < local as usize {
            let id = TaskId::new(ring as u32, self.starts[ring].len() as u32);
            self.starts[ring].push(self.words.len());
            self.words.push(id.0);
            self.words
                .extend_from_slice(&head_words(MixedKernels::NONE, 1, 0, 0, false));
        }
    }
}

impl ImagePayloads {
    /// Empties the image for a new bind, keeping its storage.
    pub(crate) fn clear(&mut self) {
        let s = self.stream.get_mut();
        s.words.clear();
        for starts in &mut s.starts {
            starts.clear();
        }
    }

    /// Where scalar `index` of `task`'s record is in the image, in words; `None` if the task
    /// has no record or no such scalar.
    pub(crate) fn scalar_word(&self, task: TaskId, index: usize) -> Option<usize> {
        let s = self.stream.borrow();
        let &at = s
            .starts
            .get(task.ring() as usize)
            .and_then(|v| v.get(task.local() as usize))?;
        let (nt, ns, _) = decode_counts(*s.words.get(at + 3)?);
        (index < ns).then_some(at + PREFIX_WORDS + nt * TENSOR_WORDS + index)
    }

    /// Overwrites scalar `index` of `task`'s record (a Graph's outer task, once its
    /// Definition is placed); false if the task has no record or no such scalar.
    pub(crate) fn patch_scalar(&self, task: TaskId, index: usize, value: u64) -> bool {
        let Some(at) = self.scalar_word(task, index) else {
            return false;
        };
        self.stream.borrow_mut().words[at] = value;
        true
    }

    /// The image of the first `tasks[r]` records of every ring (empty records added for
    /// trailing tasks without one), or `None` if a ring has records past its count.
    pub(crate) fn image(&mut self, tasks: &[u32; MAX_RINGS]) -> Option<&[u8]> {
        let s = self.stream.get_mut();
        for (ring, &n) in tasks.iter().enumerate() {
            if s.starts[ring].len() > n as usize {
                return None;
            }
            s.fill(ring, n);
        }
        Some(bytemuck::cast_slice(&s.words))
    }
}

impl ImagePayloads {
    /// Calls `f` with the position (in words) and value of every device address the records
    /// hold: each tensor's buffer address and each dispatch predicate's element address.
    /// Scalars are not among them: a scalar is a value, whatever the orchestration computed
    /// it from.
    pub(crate) fn addresses(&mut self, mut f: impl FnMut(usize, u64)) {
        let words = &self.stream.get_mut().words;
        let mut at = 0;
        while let Some(&counts) = words.get(at + PREFIX_WORDS - 1) {
            let (nt, ns, predicated) = decode_counts(counts);
            let body = at + PREFIX_WORDS;
            for t in 0..nt {
                let w = body + t * TENSOR_WORDS;
                if let Some(&v) = words.get(w) {
                    f(w, v);
                }
            }
            let end = body + nt * TENSOR_WORDS + ns;
            if predicated {
                // The predicate's first word is its element's address.
                if let Some(&v) = words.get(end) {
                    f(end, v);
                }
            }
            at = end
                + if predicated {
                    DispatchPredicate::WORDS
                } else {
                    0
                };
        }
    }

    /// The image's words, to patch in place (positions from [`Self::addresses`]).
    pub(crate) fn words_mut(&mut self) -> &mut [u64] {
        &mut self.stream.get_mut().words
    }

    /// The image as [`Self::image`] last completed it.
    pub(crate) fn bytes(&mut self) -> &[u8] {
        bytemuck::cast_slice(&self.stream.get_mut().words)
    }
}

impl PayloadSink for ImagePayloads {
    fn record(
        &self,
        task: TaskId,
        kernels: MixedKernels,
        block_num: u16,
        args: &[TaskArg],
        scalars: &[u64],
        predicate: Option<&DispatchPredicate>,
    ) {
        let ring = task.ring() as usize;
        if ring >= MAX_RINGS {
            // Not an id an orchestrator hands out; the device's records would ignore it too.
            return;
        }
        let mut s = self.stream.borrow_mut();
        if s.starts[ring].len() < task.local() as usize {
            s.fill(ring, task.local());
        }
        if s.starts[ring].len() != task.local() as usize {
            // A record for a task already recorded (never done by the orchestrator): ignored,
            // as the device's records would be overwritten in place.
            return;
        }
        let at = s.words.len();
        s.starts[ring].push(at);
        let head = head_words(
            kernels,
            block_num,
            args.len(),
            scalars.len(),
            predicate.is_some(),
        );
        s.words
            .extend_from_slice(&[task.0, head[0], head[1], head[2]]);
        for a in args {
            s.words.extend_from_slice(&a.tensor.packed());
        }
        if !scalars.is_empty() {
            s.words.extend_from_slice(scalars);
        }
        if let Some(p) = predicate {
            s.words.extend_from_slice(&p.to_words());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_aicpu::payloads::{PayloadsLayout, TaskPayloads, NO_KERNEL};
    use simpler_core::image::Reader;
    use simpler_core::layout::Line;
    use simpler_core::TensorArgType;
    use simpler_core::{AddressSpace, BufferHandle, CoreTaskArgs, DataType, TaskTensor};

    fn arg(addr: u64) -> TaskArg {
        let tensor = TaskTensor::new(
            BufferHandle { addr, size: 1024 },
            8,
            &[4, 4],
            &[4, 1],
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap();
        TaskArg {
            tensor,
            tag: TensorArgType::Input,
        }
    }

    /// The image the stream builds, imported into device records, reads back exactly what
    /// the same writes into device records directly would: across two rings in interleaved
    /// submission order, with tasks that got no record (allocation tasks, before another
    /// record and at a ring's end) read as empty, and a patched scalar.
    #[test]
    fn the_stream_image_imports_as_the_device_records_it_describes() {
        let layout = PayloadsLayout::new([16, 16, 0, 0]).unwrap();
        let mut want_mem = vec![Line([0; 64]); layout.size().div_ceil(64)];
        let want = TaskPayloads::init(bytemuck::cast_slice_mut(&mut want_mem), &layout).unwrap();
        let mut stream = ImagePayloads::default();
        let k = |n: u32| MixedKernels {
            aic: n,
            aiv0: NO_KERNEL,
            aiv1: n + 1,
        };
        let none = MixedKernels::NONE;
        // (ring, local, kernels, block count, tensors, scalars); locals 1 of ring 1 and 3 of
        // ring 0 are allocation tasks, with no record.
        type Write = (u32, u32, MixedKernels, u16, Vec<TaskArg>, Vec<u64>);
        let writes: [Write; 6] = [
            (1, 0, k(1), 2, vec![arg(0x1000), arg(0x2000)], vec![5, 6, 7]),
            (0, 0, k(3), 1, vec![arg(0x3000)], vec![]),
            (0, 1, none, 1, vec![], vec![9, 0, 0, 0, 0]),
            (1, 2, k(5), 4, vec![arg(0x4000); 3], vec![1]),
            (0, 2, k(7), 1, vec![arg(0x5000)], vec![2, 3]),
            (1, 3, k(9), 1, vec![arg(0x6000)], vec![4]),
        ];
        // Ring 1's last task and ring 0's first are predicated.
        let predicate = |id: TaskId| {
            let p = DispatchPredicate {
                addr: 0x6000 + id.0,
                target: -(id.local() as i64),
                elem_size: 2,
                op: 3,
                reserved: [0; 6],
            };
            (id == TaskId::new(1, 3) || id == TaskId::new(0, 0)).then_some(p)
        };
        for (rings, empties) in [(&mut stream as &dyn PayloadSink, false), (&want, true)] {
            for (ring, local, kernels, blocks, args, scalars) in &writes {
                let id = TaskId::new(*ring, *local);
                rings.record(id, *kernels, *blocks, args, scalars, predicate(id).as_ref());
            }
            if empties {
                for id in [TaskId::new(1, 1), TaskId::new(0, 3)] {
                    want.record(id, none, 1, &[], &[], None);
                }
            }
        }
        assert!(stream.patch_scalar(TaskId::new(0, 1), 4, 0xAB));
        assert!(want.patch_scalar(TaskId::new(0, 1), 4, 0xAB));
        assert!(
            !stream.patch_scalar(TaskId::new(0, 1), 5, 1),
            "past the scalar count"
        );
        assert!(
            !stream.patch_scalar(TaskId::new(1, 9), 0, 1),
            "no such record"
        );

        assert!(
            stream.patch_scalar(TaskId::new(1, 3), 0, 0xCD),
            "before a predicate"
        );
        assert!(want.patch_scalar(TaskId::new(1, 3), 0, 0xCD));
        assert!(
            !stream.patch_scalar(TaskId::new(1, 3), 1, 1),
            "a predicate is no scalar"
        );

        let tasks = [4, 4, 0, 0];
        let image = stream
            .image(&tasks)
            .expect("every ring within its count")
            .to_vec();
        let mut got_mem = vec![Line([0; 64]); layout.size().div_ceil(64)];
        let got = TaskPayloads::init(bytemuck::cast_slice_mut(&mut got_mem), &layout).unwrap();
        got.import(&tasks, &mut Reader::new(&image))
            .expect("import");
        for (ring, &n) in tasks.iter().enumerate() {
            for local in 0..n {
                let id = TaskId::new(ring as u32, local);
                let (mut a, mut b) = (CoreTaskArgs::new(), CoreTaskArgs::new());
                got.read_args(id, &mut a);
                want.read_args(id, &mut b);
                assert_eq!(a.tensors(), b.tensors(), "{id:?}");
                assert_eq!(a.scalars(), b.scalars(), "{id:?}");
                assert_eq!(got.kernels(id), want.kernels(id), "{id:?}");
                assert_eq!(got.predicate(id), predicate(id), "{id:?}");
            }
        }
        // A ring with records past the count the image is taken for is refused.
        assert!(stream.image(&[2, 4, 0, 0]).is_none());
        // Cleared, the stream starts the next bind empty.
        stream.clear();
        assert_eq!(stream.image(&[0; 4]).map(<[u8]>::len), Some(0));
    }
    /// The addresses are every tensor's buffer address and every predicate's element
    /// address, and nothing else (not a scalar that happens to hold an address's value):
    /// moving those in a range moves exactly them.
    #[test]
    fn addresses_are_tensor_and_predicate_addresses_and_no_scalar() {
        let layout = PayloadsLayout::new([8, 0, 0, 0]).unwrap();
        let mut stream = ImagePayloads::default();
        let pred = |addr| DispatchPredicate {
            addr,
            target: 1,
            elem_size: 4,
            op: 0,
            reserved: [0; 6],
        };
        let k = MixedKernels {
            aic: 1,
            aiv0: NO_KERNEL,
            aiv1: NO_KERNEL,
        };
        let id = |n| TaskId::new(0, n);
        stream.record(id(0), k, 1, &[arg(0x3000), arg(0x5000)], &[0x3000], None);
        // Task 1 has no record (an allocation task): its empty record is walked over.
        stream.record(
            id(2),
            k,
            1,
            &[arg(0x3400)],
            &[7, 0x3008],
            Some(&pred(0x3010)),
        );
        stream.record(id(3), k, 1, &[], &[], Some(&pred(0x5010)));
        stream.record(id(4), k, 1, &[arg(0x2fff)], &[], None);
        let tasks = [5, 0, 0, 0];
        stream.image(&tasks).unwrap();
        // 0x3000..0x4000 moves to 0x9000.
        let mut sites = Vec::new();
        stream.addresses(|at, a| sites.push((at, a)));
        for (at, a) in sites {
            if a.wrapping_sub(0x3000) < 0x1000 {
                stream.words_mut()[at] = a - 0x3000 + 0x9000;
            }
        }
        let image = stream.bytes().to_vec();
        let mut mem = vec![Line([0; 64]); layout.size().div_ceil(64)];
        let got = TaskPayloads::init(bytemuck::cast_slice_mut(&mut mem), &layout).unwrap();
        got.import(&tasks, &mut Reader::new(&image))
            .expect("import");
        let read = |n| {
            let mut a = CoreTaskArgs::new();
            got.read_args(id(n), &mut a);
            let addrs: Vec<u64> = a.tensors().iter().map(|t| t.buffer().addr).collect();
            (
                addrs,
                a.scalars().to_vec(),
                got.predicate(id(n)).map(|p| p.addr),
            )
        };
        assert_eq!(read(0), (vec![0x9000, 0x5000], vec![0x3000], None));
        assert_eq!(read(1), (vec![], vec![], None));
        assert_eq!(read(2), (vec![0x9400], vec![7, 0x3008], Some(0x9010)));
        assert_eq!(read(3), (vec![], vec![], Some(0x5010)));
        assert_eq!(read(4), (vec![0x2fff], vec![], None));
    }
}
