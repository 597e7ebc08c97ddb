//! The orchestrations the image links, by the index a boot table names
//! (`BootTable::orchestration`), and the kernel ids they use (the AICore image's table).
//!
//! Each is a root of the panic-reachability check (`tests/firmware.sh`): its body is the
//! submit path as the device runs it.

// `#[no_mangle]`: the check finds its roots by name.
#![allow(unsafe_code)]

use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{DataType, TaskTensor, TensorArgType};

/// An orchestration function.
pub type OrchFn = fn(&mut Rt<'_, '_>) -> Result<(), RtError>;

/// The image's orchestrations, by index.
pub static ORCHESTRATIONS: [OrchFn; 1] = [simpler_fw_orchestrate_vector];

/// Kernel id of `c = a + b` in the AICore image's table.
pub const ADD: u32 = 0;
/// Kernel id of `c = a + s`.
pub const ADD_SCALAR: u32 = 1;
/// Kernel id of `c = a * b`.
pub const MUL: u32 = 2;

/// Fatal code: the entry does not hold the three tensors `[a, b, f]`.
pub const ENTRY_SHAPE: u32 = 1;
/// Fatal code: an output description could not be made.
pub const OUTPUT_SHAPE: u32 = 2;

/// vector_example: f = (a + b + 1)(a + b + 2) + (a + b) over the entry `[a, b, f]`, 5 AIV
/// tasks and 6 edges, as the host's scene submits it.
#[no_mangle]
#[inline(never)]
pub fn simpler_fw_orchestrate_vector(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let [a, b, f] = match rt.args().tensors() {
        [a, b, f] => [*a, *b, *f],
        _ => return Err(rt.report_fatal(ENTRY_SHAPE)),
    };
    let Ok(out) = TaskTensor::create_info(a.shapes(), DataType::Float32) else {
        return Err(rt.report_fatal(OUTPUT_SHAPE));
    };
    let arg = |tensor, tag| TaskArg { tensor, tag };
    let output = arg(out, TensorArgType::Output);
    let mut t0 = [
        arg(a, TensorArgType::Input),
        arg(b, TensorArgType::Input),
        output,
    ];
    rt.submit_aiv(ADD, &mut t0, &[])?;
    let [_, _, TaskArg { tensor: c, .. }] = t0;
    rt.scope(ScopeMode::Auto, |rt| {
        let mut t1 = [arg(c, TensorArgType::Input), output];
        rt.submit_aiv(ADD_SCALAR, &mut t1, &[1.0f32.to_bits() as u64])?;
        let mut t2 = [arg(c, TensorArgType::Input), output];
        rt.submit_aiv(ADD_SCALAR, &mut t2, &[2.0f32.to_bits() as u64])?;
        let [_, TaskArg { tensor: d, .. }] = t1;
        let [_, TaskArg { tensor: e, .. }] = t2;
        let mut t3 = [
            arg(d, TensorArgType::Input),
            arg(e, TensorArgType::Input),
            output,
        ];
        rt.submit_aiv(MUL, &mut t3, &[])?;
        let [_, _, TaskArg { tensor: g, .. }] = t3;
        let mut t4 = [
            arg(g, TensorArgType::Input),
            arg(c, TensorArgType::Input),
            arg(f, TensorArgType::OutputExisting),
        ];
        rt.submit_aiv(ADD, &mut t4, &[])?;
        Ok(())
    })
}
