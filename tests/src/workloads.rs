//! The reference scenes' own task streams on a bare [`Orchestrator`]: no kernels, no device,
//! no data but the few elements a stream reads. What the `submit` benchmark times.
//!
//! The `paged_attention` and `bgemm` scenes write their orchestration once, generic over
//! [`TaskStream`] (`simpler_host::scenes::stream`); [`Bare`] implements that trait over a bare
//! orchestrator, so [`Workload::run`] submits exactly the tasks, tensors, tags and scopes the
//! scene submits on a device, and a change to a scene's stream changes the benchmark with it.
//! What the bare run leaves out: the payloads (kernel ids and scalars are dropped; no
//! scheduler reads them) and the run's outer scope, which the caller opens.
//!
//! The entry tensors are descriptors over made-up device addresses
//! ([`fixtures::entry_tensor`]); runtime outputs live in the heap rings, which are address
//! ranges only. An element the stream reads (paged attention's block table and context lengths)
//! comes from the host copy of the scene's staged bytes ([`StreamEntry`]).

use crate::fixtures;
use simpler_aicpu::RtError;
use simpler_core::cores::ActiveMask;
use simpler_core::deps::ExplicitDep;
use simpler_core::gm::GmFault;
use simpler_core::orchestrator::{Orchestrator, Task, TaskArg, Waiter};
use simpler_core::scope::ScopeMode;
use simpler_core::{TaskId, TaskTensor};
use simpler_host::scenes::stream::{StreamEntry, TaskStream};
use simpler_host::scenes::{bgemm, paged_attention};

/// The scheduler side of a bare stream: the orchestrator's [`Waiter`] when a resource is full,
/// and told each time the stream closes one of its own scopes, the point where a scheduler
/// keeping up would have run what the scope submitted (the `submit` benchmark drains there).
pub trait Backstop: Waiter {
    /// Called right after the stream closed a scope it opened (never the caller's outer one).
    /// Does nothing unless the implementation says otherwise.
    fn scope_closed(&mut self) {}
}

impl Backstop for crate::harness::Drain<'_> {}

/// Whose stream a [`Workload`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamedScene {
    PagedAttention,
    Bgemm,
}

/// One scene case, ready to run its stream on a bare orchestrator any number of times: the
/// entry tensors at their made-up addresses and the bytes of those the stream reads, built
/// once, so a run allocates nothing on the host heap.
#[derive(Clone, Debug)]
pub struct Workload {
    scene: StreamedScene,
    tensors: Vec<TaskTensor>,
    /// Per entry tensor, the staged bytes of one the stream reads.
    data: Vec<Option<Vec<u8>>>,
    scalars: Vec<u64>,
    tasks: u64,
    edges: u64,
}

impl Workload {
    /// `paged_attention`'s case `case` (the benchmark's is `Bench16704`: 64 sequences of 65 KV
    /// blocks, 16,704 tasks). Panics on an unknown case.
    pub fn paged_attention(case: &str) -> Self {
        let entry = paged_attention::stream_entry(case).expect("a paged_attention case");
        Self::new(StreamedScene::PagedAttention, entry)
    }

    /// `bgemm`'s case `case` (the benchmark's is `Case0`: 250 groups × grid_k 2 = 1000 tasks
    /// on 128 × 128 tiles). Panics on an unknown case.
    pub fn bgemm(case: &str) -> Self {
        Self::new(
            StreamedScene::Bgemm,
            bgemm::stream_entry(case).expect("a bgemm case"),
        )
    }

    fn new(scene: StreamedScene, entry: StreamEntry) -> Self {
        let tensors = entry
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| fixtures::entry_tensor(i, &t.shapes, t.dtype))
            .collect();
        Self {
            scene,
            tensors,
            data: entry.tensors.into_iter().map(|t| t.data).collect(),
            scalars: entry.scalars,
            tasks: entry.tasks,
            edges: entry.edges,
        }
    }

    /// Tasks one run submits (allocation tasks included), from the scene's own case table.
    pub fn tasks(&self) -> u64 {
        self.tasks
    }

    /// Producer-consumer edges one run's tasks have, from the scene's own case table.
    pub fn edges(&self) -> u64 {
        self.edges
    }

    /// Submits the scene's whole stream into `orch`, inside the scope the caller has open
    /// (the runtime's outer scope on a device), with `backstop` as the waiter; returns the tasks
    /// it submitted.
    pub fn run(
        &self,
        orch: &mut Orchestrator<'_>,
        backstop: &mut impl Backstop,
    ) -> Result<usize, RtError> {
        let mut bare = Bare {
            orch,
            backstop,
            entry: self,
            submitted: 0,
        };
        match self.scene {
            StreamedScene::PagedAttention => paged_attention::stream(&mut bare)?,
            StreamedScene::Bgemm => bgemm::stream(&mut bare)?,
        }
        Ok(bare.submitted)
    }
}

/// [`TaskStream`] over a bare orchestrator: submits go straight to
/// [`Orchestrator::submit`] (kernel ids and scalars are dropped), scopes to
/// `scope_begin`/`scope_end` followed by [`Backstop::scope_closed`], element reads to the
/// workload's staged bytes. Built by [`Workload::run`].
pub struct Bare<'r, 'a, B> {
    orch: &'r mut Orchestrator<'a>,
    backstop: &'r mut B,
    entry: &'r Workload,
    /// Tasks submitted so far, allocation tasks included.
    submitted: usize,
}

impl<B: Backstop> Bare<'_, '_, B> {
    fn submit(
        &mut self,
        mask: ActiveMask,
        args: &mut [TaskArg],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        let task = Task {
            mask,
            block_num: 1,
            args,
            deps,
            predicate: None,
        };
        let id = self.orch.submit(task, &mut *self.backstop)?;
        self.submitted += 1;
        Ok(id)
    }
}

impl<B: Backstop> TaskStream for Bare<'_, '_, B> {
    type Error = RtError;

    fn tensors(&self) -> &[TaskTensor] {
        &self.entry.tensors
    }

    fn scalars(&self) -> &[u64] {
        &self.entry.scalars
    }

    fn fatal(&mut self, code: u32) -> RtError {
        RtError::Fatal(code)
    }

    fn submit_aic_with_deps(
        &mut self,
        _kernel: u32,
        args: &mut [TaskArg],
        _scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        self.submit(ActiveMask::AIC, args, deps)
    }

    fn submit_aiv_with_deps(
        &mut self,
        _kernel: u32,
        args: &mut [TaskArg],
        _scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        self.submit(ActiveMask::AIV0, args, deps)
    }

    fn alloc_tensors(&mut self, outputs: &mut [TaskArg]) -> Result<TaskId, RtError> {
        let id = self.orch.alloc_tensors(outputs, &mut *self.backstop)?;
        self.submitted += 1;
        Ok(id)
    }

    fn scope<R>(
        &mut self,
        mode: ScopeMode,
        body: impl FnOnce(&mut Self) -> Result<R, RtError>,
    ) -> Result<R, RtError> {
        self.orch.scope_begin(mode)?;
        let result = body(self);
        // As on the device, the scope closes even when the body failed.
        let ended = self.orch.scope_end();
        let value = result?;
        ended?;
        self.backstop.scope_closed();
        Ok(value)
    }

    fn read_element(&mut self, tensor: &TaskTensor, index: u64) -> Result<u64, RtError> {
        // The element's address as the device runtime computes it.
        let addr = tensor.element_addr(index).ok_or(RtError::Index {
            index,
            numel: tensor.numel(),
        })?;
        let size = tensor.dtype().elem_size() as u64;
        let fault = RtError::Memory(GmFault {
            addr,
            len: size,
            kind: simpler_core::gm::GmFaultKind::Outside,
        });
        // Only an entry tensor the stream reads has bytes here.
        let (base, bytes) = self
            .entry
            .tensors
            .iter()
            .zip(&self.entry.data)
            .filter_map(|(t, d)| Some((t.buffer().addr, d.as_deref()?)))
            .find(|&(base, bytes)| addr >= base && addr + size <= base + bytes.len() as u64)
            .ok_or(fault)?;
        let at = (addr - base) as usize;
        let mut word = [0u8; 8];
        word[..size as usize].copy_from_slice(&bytes[at..at + size as usize]);
        Ok(u64::from_le_bytes(word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{with_runtime, Drain};
    use simpler_core::orchestrator::OrchestratorConfig;

    const HEAPS: [u64; 4] = [
        0x100_0000_0000,
        0x200_0000_0000,
        0x300_0000_0000,
        0x400_0000_0000,
    ];

    /// Runs `w` in an outer scope; returns the tasks it reported, the tasks ring 1 holds, and
    /// the edges of those.
    fn tasks_and_edges(w: &Workload) -> (usize, usize, usize) {
        with_runtime(OrchestratorConfig::with_heaps(HEAPS), |orch, shared| {
            let mut drain = Drain::new(shared);
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let n = w.run(orch, &mut drain).unwrap();
            let submitted = orch.submitted(1) as usize;
            let edges = (0..submitted as u32)
                .map(|i| shared.fanin(TaskId::new(1, i)).count())
                .sum();
            orch.scope_end().unwrap();
            drain.run();
            (n, submitted, edges)
        })
    }

    #[test]
    fn paged_attention_case_small1_has_the_reference_counts() {
        let w = Workload::paged_attention("CaseSmall1");
        assert_eq!(tasks_and_edges(&w), (13, 13, 17));
        assert_eq!((w.tasks(), w.edges()), (13, 17));
        assert_eq!(Workload::paged_attention("Bench16704").tasks(), 16_704);
    }

    #[test]
    fn bgemm_case1_has_the_reference_counts() {
        let w = Workload::bgemm("Case1");
        assert_eq!(tasks_and_edges(&w), (128, 128, 96));
        assert_eq!((w.tasks(), w.edges()), (128, 96));
        assert_eq!(Workload::bgemm("Case0").tasks(), 1000);
    }

    #[test]
    fn an_element_outside_the_staged_bytes_is_a_memory_fault() {
        with_runtime(OrchestratorConfig::with_heaps(HEAPS), |orch, shared| {
            let w = Workload::paged_attention("CaseSmall1");
            let mut drain = Drain::new(shared);
            let mut bare = Bare {
                orch,
                backstop: &mut drain,
                entry: &w,
                submitted: 0,
            };
            // context_lens[0] is CaseSmall1's 33 tokens; the query's bytes are not staged.
            let [query, .., context_lens, _] = w.tensors[..] else {
                unreachable!("six entry tensors")
            };
            assert_eq!(bare.read_element(&context_lens, 0), Ok(33));
            assert!(matches!(
                bare.read_element(&query, 0),
                Err(RtError::Memory(_))
            ));
            assert_eq!(
                bare.read_element(&context_lens, 1),
                Err(RtError::Index { index: 1, numel: 1 })
            );
        });
    }
}
