//! Persistent device memory on a chip (`DEVICE_MALLOC`): `malloc` / `free`, copies in and out
//! of it, and runs whose entry tensors already live there (`ChipArg::Device`), checked against
//! goldens computed here and against the per-run staging that shares GM with it.

use simpler_aicore::kernels;
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, DataType, EntryError, TensorArgType};
use simpler_host::{
    ChipArg, ChipWorker, DeviceTensor, HostTensor, OrchFn, RunOptions, WorkerError,
};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::fixtures::f32_bytes;
use std::sync::Arc;

/// vector_example's shape and element count.
const SHAPE: [u32; 2] = [128, 128];
const N: usize = 128 * 128;

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// vector_example's function, in plain f32: f = (a + b + 1)(a + b + 2) + (a + b).
fn vector_golden(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let s = x + y;
            (s + 1.0) * (s + 2.0) + s
        })
        .collect()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "element {i}: got {g}, want {w}"
        );
    }
}

fn input_a() -> Vec<f32> {
    (0..N).map(|i| (i % 97) as f32 * 0.25 - 3.0).collect()
}

fn input_b(round: usize) -> Vec<f32> {
    (0..N)
        .map(|i| (i % 13) as f32 * 0.5 + round as f32)
        .collect()
}

/// A worker with vector_example registered.
fn vector_worker(config: DeviceConfig) -> (ChipWorker, simpler_host::CallableHandle) {
    let mut worker = ChipWorker::init(config).unwrap();
    let prepared = simpler_host::scenes::find("vector_example")
        .unwrap()
        .prepare("default")
        .unwrap();
    let handle = worker.register(prepared.callable);
    (worker, handle)
}

/// `c = a + b` as one AIV task: tensors `[a IN, b IN, c OUT]`.
fn add_callable(worker: &mut ChipWorker) -> simpler_host::CallableHandle {
    let orch: OrchFn = Arc::new(|rt| {
        let [a, b, c] = match rt.args().tensors() {
            [a, b, c] => [*a, *b, *c],
            _ => return Err(rt.report_fatal(1)),
        };
        let mut args = [
            TaskArg {
                tensor: a,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: b,
                tag: TensorArgType::Input,
            },
            TaskArg {
                tensor: c,
                tag: TensorArgType::OutputExisting,
            },
        ];
        rt.submit_aiv(0, &mut args, &[])?;
        Ok(())
    });
    worker.register_callable(
        orch,
        vec![kernels::add],
        vec![ArgDirection::In, ArgDirection::In, ArgDirection::Out],
    )
}

fn device_f32(addr: u64, shapes: &[u32], dir: ArgDirection) -> ChipArg {
    ChipArg::Device(DeviceTensor::contiguous(
        addr,
        shapes,
        DataType::Float32,
        dir,
    ))
}

fn host_out(n: usize, shapes: &[u32]) -> ChipArg {
    ChipArg::Host(HostTensor::f32(&vec![0.0; n], shapes, ArgDirection::Out))
}

fn host_data(arg: &ChipArg) -> Vec<f32> {
    match arg {
        ChipArg::Host(t) => t.to_f32(),
        ChipArg::Device(_) => panic!("not a host tensor"),
    }
}

fn read_f32(worker: &mut ChipWorker, addr: u64, n: usize) -> Vec<f32> {
    let mut out = vec![0u8; n * 4];
    worker.copy_from_device(addr, &mut out).unwrap();
    f32_values(&out)
}

#[test]
fn malloced_input_survives_runs() {
    let (mut worker, handle) = vector_worker(DeviceConfig::new(Topology::A2a3));
    let a = input_a();
    let addr = worker.malloc((N * 4) as u64).unwrap();
    assert_eq!(addr % 1024, 0);
    worker.copy_to_device(addr, &f32_bytes(&a)).unwrap();
    for round in 0..2 {
        let b = input_b(round);
        let mut args = vec![
            device_f32(addr, &SHAPE, ArgDirection::In),
            ChipArg::Host(HostTensor::f32(&b, &SHAPE, ArgDirection::In)),
            host_out(N, &SHAPE),
        ];
        let report = worker
            .run(handle, &mut args, &[], RunOptions::default())
            .unwrap();
        assert_eq!(report.outcome.tasks, 5);
        assert_close(&host_data(&args[2]), &vector_golden(&a, &b));
        // The device input is untouched by the run and its staging.
        assert_eq!(read_f32(&mut worker, addr, N), a);
    }
    // A plain host run in between does not disturb it either.
    let prepared = simpler_host::scenes::find("vector_example")
        .unwrap()
        .prepare("default")
        .unwrap();
    let mut tensors = prepared.tensors;
    worker
        .run(handle, &mut tensors, &[], RunOptions::default())
        .unwrap();
    assert!((prepared.check)(&tensors).pass);
    assert_eq!(read_f32(&mut worker, addr, N), a);
}

#[test]
fn device_output_is_readable_after_the_run() {
    let (mut worker, handle) = vector_worker(DeviceConfig::new(Topology::A5));
    let (a, b) = (input_a(), input_b(3));
    let a_addr = worker.malloc((N * 4) as u64).unwrap();
    let f_addr = worker.malloc((N * 4) as u64).unwrap();
    worker.copy_to_device(a_addr, &f32_bytes(&a)).unwrap();
    worker
        .copy_to_device(f_addr, &f32_bytes(&vec![-1.0; N]))
        .unwrap();
    let mut args = vec![
        device_f32(a_addr, &SHAPE, ArgDirection::In),
        ChipArg::Host(HostTensor::f32(&b, &SHAPE, ArgDirection::In)),
        device_f32(f_addr, &SHAPE, ArgDirection::Out),
    ];
    worker
        .run(handle, &mut args, &[], RunOptions::default())
        .unwrap();
    let golden = vector_golden(&a, &b);
    assert_close(&read_f32(&mut worker, f_addr, N), &golden);
    // The result stays there across another run that writes elsewhere.
    let mut args = vec![
        device_f32(a_addr, &SHAPE, ArgDirection::In),
        ChipArg::Host(HostTensor::f32(&a, &SHAPE, ArgDirection::In)),
        host_out(N, &SHAPE),
    ];
    worker
        .run(handle, &mut args, &[], RunOptions::default())
        .unwrap();
    assert_close(&host_data(&args[2]), &vector_golden(&a, &a));
    assert_close(&read_f32(&mut worker, f_addr, N), &golden);
}

#[test]
fn strided_device_view_is_used_in_place() {
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).unwrap();
    let handle = add_callable(&mut worker);
    // A 64 x 128 buffer; the view is its left 64 x 64 half (row stride 128).
    let wide: Vec<f32> = (0..64 * 128).map(|i| i as f32 * 0.5).collect();
    let addr = worker.malloc((wide.len() * 4) as u64).unwrap();
    worker.copy_to_device(addr, &f32_bytes(&wide)).unwrap();
    let b: Vec<f32> = (0..64 * 64).map(|i| 1000.0 - i as f32).collect();
    let view = DeviceTensor {
        addr,
        shapes: vec![64, 64],
        strides: vec![128, 1],
        dtype: DataType::Float32,
        dir: ArgDirection::In,
    };
    let mut args = vec![
        ChipArg::Device(view),
        ChipArg::Host(HostTensor::f32(&b, &[64, 64], ArgDirection::In)),
        host_out(64 * 64, &[64, 64]),
    ];
    worker
        .run(handle, &mut args, &[], RunOptions::default())
        .unwrap();
    let golden: Vec<f32> = (0..64 * 64)
        .map(|i| wide[(i / 64) * 128 + i % 64] + b[i])
        .collect();
    assert_close(&host_data(&args[2]), &golden);
}

#[test]
fn free_then_reuse_and_unknown_addresses() {
    let (mut worker, _) = vector_worker(DeviceConfig::new(Topology::A2a3));
    let bytes = 3 * 4096 + 100;
    let first = worker.malloc(bytes).unwrap();
    let second = worker.malloc(bytes).unwrap();
    assert!(second + bytes <= first || first + bytes <= second);
    worker.free(first).unwrap();
    // The freed space is the top gap, which first fit takes again.
    let again = worker.malloc(bytes).unwrap();
    assert_eq!(again, first);
    worker.copy_to_device(again, &[7u8; 16]).unwrap();
    // Not an allocation start: interior, never allocated, or already freed.
    assert!(matches!(
        worker.free(again + 8),
        Err(WorkerError::UnknownDeviceAddress { addr }) if addr == again + 8
    ));
    assert!(matches!(
        worker.free(0x1234),
        Err(WorkerError::UnknownDeviceAddress { addr: 0x1234 })
    ));
    worker.free(second).unwrap();
    assert!(matches!(
        worker.free(second),
        Err(WorkerError::UnknownDeviceAddress { addr }) if addr == second
    ));
    // A freed region can no longer be copied to.
    assert!(matches!(
        worker.copy_to_device(second, &[1]),
        Err(WorkerError::DeviceRange { addr, len: 1 }) if addr == second
    ));
    // malloc(0) is one byte.
    let tiny = worker.malloc(0).unwrap();
    assert_eq!(tiny % 1024, 0);
    worker.copy_to_device(tiny, &[9]).unwrap();
    assert!(matches!(
        worker.copy_to_device(tiny, &[9, 9]),
        Err(WorkerError::DeviceRange { len: 2, .. })
    ));
    worker.free(tiny).unwrap();
    worker.free(again).unwrap();
}

#[test]
fn copies_outside_a_live_allocation_are_refused() {
    let (mut worker, _) = vector_worker(DeviceConfig::new(Topology::A2a3));
    let bytes = 4000u64;
    let addr = worker.malloc(bytes).unwrap();
    let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    worker.copy_to_device(addr, &data).unwrap();
    let mut back = vec![0u8; bytes as usize];
    worker.copy_from_device(addr, &mut back).unwrap();
    assert_eq!(back, data);
    // Interior ranges that stay inside are fine.
    let mut mid = [0u8; 10];
    worker.copy_from_device(addr + 3990, &mut mid).unwrap();
    assert_eq!(&mid[..], &data[3990..]);
    // One byte past the end.
    let end = addr + bytes;
    assert!(matches!(
        worker.copy_to_device(end, &[1]),
        Err(WorkerError::DeviceRange { addr: a, len: 1 }) if a == end
    ));
    assert!(matches!(
        worker.copy_from_device(end, &mut [0u8; 1]),
        Err(WorkerError::DeviceRange { addr: a, len: 1 }) if a == end
    ));
    // An interior start that overruns the end.
    assert!(matches!(
        worker.copy_to_device(addr + 3996, &[0u8; 8]),
        Err(WorkerError::DeviceRange { addr: a, len: 8 }) if a == addr + 3996
    ));
    assert!(matches!(
        worker.copy_from_device(addr + 3996, &mut [0u8; 8]),
        Err(WorkerError::DeviceRange { addr: a, len: 8 }) if a == addr + 3996
    ));
    // The whole allocation plus one byte; and a byte before it.
    assert!(matches!(
        worker.copy_to_device(addr, &vec![0u8; bytes as usize + 1]),
        Err(WorkerError::DeviceRange { .. })
    ));
    assert!(matches!(
        worker.copy_from_device(addr - 1, &mut [0u8; 2]),
        Err(WorkerError::DeviceRange { .. })
    ));
    // A range spanning two adjacent allocations is inside neither.
    let below = worker.malloc(1024).unwrap();
    assert_eq!(below + 1024, addr);
    assert!(matches!(
        worker.copy_to_device(addr - 4, &[0u8; 8]),
        Err(WorkerError::DeviceRange { .. })
    ));
    // Nothing refused was written.
    worker.copy_from_device(addr, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn overrunning_device_view_is_refused() {
    let (mut worker, handle) = vector_worker(DeviceConfig::new(Topology::A2a3));
    let (a, b) = (input_a(), input_b(1));
    // One element short of the view.
    let short = worker.malloc((N * 4 - 4) as u64).unwrap();
    let mut args = vec![
        device_f32(short, &SHAPE, ArgDirection::In),
        ChipArg::Host(HostTensor::f32(&b, &SHAPE, ArgDirection::In)),
        host_out(N, &SHAPE),
    ];
    match worker.run(handle, &mut args, &[], RunOptions::default()) {
        Err(WorkerError::DeviceRange { addr, len }) => {
            assert_eq!((addr, len), (short, (N * 4) as u64));
        }
        other => panic!("expected a device range error, got {other:?}"),
    }
    // A strided view reaching past a large enough allocation's end.
    let full = worker.malloc((N * 4) as u64).unwrap();
    worker.copy_to_device(full, &f32_bytes(&a)).unwrap();
    let strided = DeviceTensor {
        addr: full,
        shapes: SHAPE.to_vec(),
        strides: vec![129, 1],
        dtype: DataType::Float32,
        dir: ArgDirection::In,
    };
    args[0] = ChipArg::Device(strided);
    assert!(matches!(
        worker.run(handle, &mut args, &[], RunOptions::default()),
        Err(WorkerError::DeviceRange { .. })
    ));
    // A view starting inside but not at the allocation, running past it.
    args[0] = device_f32(full + 4, &SHAPE, ArgDirection::In);
    assert!(matches!(
        worker.run(handle, &mut args, &[], RunOptions::default()),
        Err(WorkerError::DeviceRange { .. })
    ));
    // A freed allocation is no longer usable.
    worker.free(short).unwrap();
    args[0] = device_f32(short, &[8], ArgDirection::In);
    assert!(matches!(
        worker.run(handle, &mut args, &[], RunOptions::default()),
        Err(WorkerError::DeviceRange { .. })
    ));
    // Signature checks apply to device tensors too.
    args[0] = device_f32(full, &SHAPE, ArgDirection::Out);
    assert!(matches!(
        worker.run(handle, &mut args, &[], RunOptions::default()),
        Err(WorkerError::Direction {
            index: 0,
            expected: ArgDirection::In,
            got: ArgDirection::Out
        })
    ));
    // Strides that do not match the shape are refused as a geometry error.
    args[0] = ChipArg::Device(DeviceTensor {
        addr: full,
        shapes: SHAPE.to_vec(),
        strides: vec![1],
        dtype: DataType::Float32,
        dir: ArgDirection::In,
    });
    assert!(matches!(
        worker.run(handle, &mut args, &[], RunOptions::default()),
        Err(WorkerError::Entry(EntryError::Adopt { index: 0, .. }))
    ));
    // The worker still runs a good job, and the host output was not touched by the refusals.
    assert_eq!(host_data(&args[2]), vec![0.0; N]);
    args[0] = device_f32(full, &SHAPE, ArgDirection::In);
    worker
        .run(handle, &mut args, &[], RunOptions::default())
        .unwrap();
    assert_close(&host_data(&args[2]), &vector_golden(&a, &b));
}

#[test]
fn persistent_memory_and_per_run_staging_do_not_overlap() {
    // 16 MiB of host GM: persistent allocations at its top, three 4 MiB staged tensors below.
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.gm_bytes = 16 << 20;
    let mut worker = ChipWorker::init(config).unwrap();
    let handle = add_callable(&mut worker);
    let pattern = |k: usize, len: usize| -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + k * 7) % 253) as u8).collect()
    };
    let mut live: Vec<(u64, Vec<u8>)> = Vec::new();
    for k in 0..24 {
        let len = 1000 + k * 4099;
        let addr = worker.malloc(len as u64).unwrap();
        live.push((addr, pattern(k, len)));
    }
    // Free every third one and allocate into the gaps, to exercise first fit.
    for (k, i) in (100..).zip((0..live.len()).step_by(3)) {
        worker.free(live[i].0).unwrap();
        let len = live[i].1.len() / 2 + 1;
        let addr = worker.malloc(len as u64).unwrap();
        live[i] = (addr, pattern(k, len));
    }
    for (addr, data) in &live {
        assert_eq!(addr % 1024, 0);
        worker.copy_to_device(*addr, data).unwrap();
    }
    let mut spans: Vec<(u64, u64)> = live
        .iter()
        .map(|(a, d)| (*a, *a + d.len() as u64))
        .collect();
    spans.sort();
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");

    let n = 1024 * 1024;
    let shape = [1024u32, 1024];
    let a: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
    for _ in 0..2 {
        let mut tensors = vec![
            HostTensor::f32(&a, &shape, ArgDirection::In),
            HostTensor::f32(&b, &shape, ArgDirection::In),
            HostTensor::f32(&vec![0.0; n], &shape, ArgDirection::Out),
        ];
        worker
            .run(handle, &mut tensors, &[], RunOptions::default())
            .unwrap();
        let got = tensors[2].to_f32();
        for i in (0..n).step_by(997).chain([n - 1]) {
            assert_eq!(got[i], a[i] + b[i], "element {i}");
        }
        for (addr, data) in &live {
            let mut back = vec![0u8; data.len()];
            worker.copy_from_device(*addr, &mut back).unwrap();
            assert_eq!(&back, data, "persistent allocation at {addr:#x}");
        }
    }
    // The last run's 12 MiB of staging does not keep a large malloc from fitting.
    let large = worker.malloc(12 << 20).unwrap();
    assert!(spans
        .iter()
        .all(|&(s, e)| e <= large || large + (12 << 20) <= s));
    worker.free(large).unwrap();
    // Staging that does not fit below the persistent allocations is refused, not overlapped.
    let big = 2 * n;
    let mut tensors = vec![
        HostTensor::f32(&vec![1.0; big], &[2048, 1024], ArgDirection::In),
        HostTensor::f32(&vec![2.0; big], &[2048, 1024], ArgDirection::In),
        HostTensor::f32(&vec![0.0; big], &[2048, 1024], ArgDirection::Out),
    ];
    assert!(matches!(
        worker.run(handle, &mut tensors, &[], RunOptions::default()),
        Err(WorkerError::OutOfDeviceMemory { .. })
    ));
    for (addr, data) in &live {
        let mut back = vec![0u8; data.len()];
        worker.copy_from_device(*addr, &mut back).unwrap();
        assert_eq!(&back, data, "persistent allocation at {addr:#x}");
    }
}

#[test]
fn malloc_that_cannot_fit_is_out_of_device_memory() {
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.gm_bytes = 1 << 20;
    let (mut worker, handle) = vector_worker(config);
    assert!(matches!(
        worker.malloc(u64::MAX),
        Err(WorkerError::OutOfDeviceMemory { bytes: u64::MAX })
    ));
    assert!(matches!(
        worker.malloc((1 << 20) + 1),
        Err(WorkerError::OutOfDeviceMemory { bytes }) if bytes == (1 << 20) + 1
    ));
    // Fill GM with 64 KiB allocations; the next one does not fit.
    let mut addrs = Vec::new();
    loop {
        match worker.malloc(64 << 10) {
            Ok(addr) => addrs.push(addr),
            Err(WorkerError::OutOfDeviceMemory { bytes }) => {
                assert_eq!(bytes, 64 << 10);
                break;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(addrs.len(), 16);
    // With GM full of persistent memory a run cannot stage its tensors.
    let prepared = simpler_host::scenes::find("vector_example")
        .unwrap()
        .prepare("default")
        .unwrap();
    let mut tensors = prepared.tensors.clone();
    assert!(matches!(
        worker.run(handle, &mut tensors, &[], RunOptions::default()),
        Err(WorkerError::OutOfDeviceMemory { .. })
    ));
    // Freeing the top ones leaves the bump's limit where it was: still no room.
    for addr in addrs.drain(..4) {
        worker.free(addr).unwrap();
    }
    let mut tensors = prepared.tensors.clone();
    assert!(matches!(
        worker.run(handle, &mut tensors, &[], RunOptions::default()),
        Err(WorkerError::OutOfDeviceMemory { .. })
    ));
    // Freeing the lowest ones makes room for the run again.
    let lowest = addrs.len() - 4;
    for addr in addrs.drain(lowest..) {
        worker.free(addr).unwrap();
    }
    let mut tensors = prepared.tensors.clone();
    worker
        .run(handle, &mut tensors, &[], RunOptions::default())
        .unwrap();
    assert!((prepared.check)(&tensors).pass);
}
