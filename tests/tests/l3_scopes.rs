//! L3 scopes and scope-owned intermediates (`L3Orch::scope`, `L3Orch::alloc`).
//!
//! Runs on the sequential runner (tests/src/forked.rs): every Worker forks its children.

use simpler_core::{AccessMode, BackendKind, DataType, TensorArgType};
use simpler_host::l3::{L3Error, MappedArgs, SubCallableId, Worker, WorkerConfig};
use simpler_tests::l3::{register_sub, targs, CLOSE};

const N: usize = 1024;

/// fill: out[..] = f32::from_bits(scalar 0).
fn fill(args: &mut MappedArgs) -> Result<(), String> {
    let v = f32::from_bits(args.scalars[0] as u32);
    let n = args.args[0].shapes.iter().product::<u32>() as usize;
    args.args[0]
        .write_f32s(&vec![v; n])
        .map_err(|e| e.to_string())
}

/// add_one: out[i] = in[i] + 1.
fn add_one(args: &mut MappedArgs) -> Result<(), String> {
    let x: Vec<f32> = args.args[0].read_f32s().iter().map(|v| v + 1.0).collect();
    args.args[1].write_f32s(&x).map_err(|e| e.to_string())
}

/// first_to: out[scalar 0] = in[0].
fn first_to(args: &mut MappedArgs) -> Result<(), String> {
    let v = args.args[0].read_f32s()[0];
    let at = args.scalars[0] as usize;
    let mut all = args.args[1].read_f32s();
    all[at] = v;
    args.args[1].write_f32s(&all).map_err(|e| e.to_string())
}

struct Fixture {
    worker: Worker,
    fill: SubCallableId,
    add_one: SubCallableId,
    first_to: SubCallableId,
}

fn fixture(arena: usize) -> Fixture {
    let mut config = WorkerConfig::new(0, 2);
    config.fork_arena_bytes = arena;
    let mut worker = Worker::new(config).expect("worker");
    let fill = register_sub(&mut worker, "fill", fill);
    let add_one = register_sub(&mut worker, "add_one", add_one);
    let first_to = register_sub(&mut worker, "first_to", first_to);
    worker.init().expect("init");
    Fixture {
        worker,
        fill,
        add_one,
        first_to,
    }
}

fn scope_intermediate_feeds_its_consumer_and_dies_with_the_scope() {
    let mut f = fixture(16 << 20);
    let out = f
        .worker
        .create_buffer((N * 4) as u64, AccessMode::ReadWrite, BackendKind::PosixShm)
        .expect("buffer");
    let out_t = out
        .tensor(&[N as u32], DataType::Float32, 0)
        .expect("tensor");
    let mut kept = None;
    f.worker
        .run(|o| {
            o.scope(|o| {
                assert_eq!(o.scope_depth(), 1);
                let x = o.alloc((N * 4) as u64)?;
                let xt = x.tensor(&[N as u32], DataType::Float32, 0)?;
                o.submit_sub(
                    f.fill,
                    &targs(
                        &[(xt, TensorArgType::OutputExisting)],
                        &[5.0f32.to_bits() as u64],
                    ),
                )?;
                o.submit_sub(
                    f.add_one,
                    &targs(
                        &[
                            (xt, TensorArgType::Input),
                            (out_t, TensorArgType::OutputExisting),
                        ],
                        &[],
                    ),
                )?;
                kept = Some(x);
                Ok(())
            })
        })
        .expect("run");
    assert!(out.read_f32s(0, N).expect("read").iter().all(|&v| v == 6.0));
    let x = kept.expect("the scope ran");
    assert!(matches!(
        x.tensor(&[N as u32], DataType::Float32, 0),
        Err(L3Error::BufferClosed { .. })
    ));
    f.worker.close(CLOSE).expect("close");
}

fn arena_back_pressure_releases_earlier_scopes_within_the_run() {
    // 16 scopes of 1 MiB each through a 4 MiB arena: only possible if each scope's
    // intermediate is released once its tasks retire, during the run.
    let mut f = fixture(4 << 20);
    let out = f
        .worker
        .create_buffer(64, AccessMode::ReadWrite, BackendKind::PosixShm)
        .expect("buffer");
    let out_t = out.tensor(&[16], DataType::Float32, 0).expect("tensor");
    f.worker
        .run(|o| {
            for i in 0..16u64 {
                o.scope(|o| {
                    let x = o.alloc(1 << 20)?;
                    let xt = x.tensor(&[1 << 18], DataType::Float32, 0)?;
                    let v = (i as f32) * 1.5;
                    o.submit_sub(
                        f.fill,
                        &targs(
                            &[(xt, TensorArgType::OutputExisting)],
                            &[v.to_bits() as u64],
                        ),
                    )?;
                    o.submit_sub(
                        f.first_to,
                        &targs(
                            &[(xt, TensorArgType::Input), (out_t, TensorArgType::InOut)],
                            &[i],
                        ),
                    )?;
                    Ok(())
                })?;
            }
            Ok(())
        })
        .expect("run");
    let got = out.read_f32s(0, 16).expect("read");
    let want: Vec<f32> = (0..16).map(|i| i as f32 * 1.5).collect();
    assert_eq!(got, want);
    f.worker.close(CLOSE).expect("close");
}

fn scopes_deeper_than_64_fail_the_run_and_the_worker_goes_on() {
    let mut f = fixture(1 << 20);
    fn nest(o: &mut simpler_host::l3::L3Orch<'_>, left: usize) -> Result<(), L3Error> {
        if left == 0 {
            return Ok(());
        }
        o.scope(|o| nest(o, left - 1))
    }
    let err = f.worker.run(|o| nest(o, 70)).expect_err("too deep");
    assert!(
        matches!(&err, L3Error::Orchestration(m) if m.contains("deeper than 64")),
        "{err}"
    );
    f.worker.run(|o| nest(o, 64)).expect("64 deep is fine");
    f.worker.close(CLOSE).expect("close");
}

fn main() -> std::process::ExitCode {
    simpler_tests::forked::run(&[
        (
            "scope_intermediate_feeds_its_consumer_and_dies_with_the_scope",
            scope_intermediate_feeds_its_consumer_and_dies_with_the_scope,
        ),
        (
            "arena_back_pressure_releases_earlier_scopes_within_the_run",
            arena_back_pressure_releases_earlier_scopes_within_the_run,
        ),
        (
            "scopes_deeper_than_64_fail_the_run_and_the_worker_goes_on",
            scopes_deeper_than_64_fail_the_run_and_the_worker_goes_on,
        ),
    ])
}
