//! Fuzzes the blob decoder: `read_blob` on arbitrary bytes, then every accessor of the view.
//!
//! Invariants: nothing panics; every tensor the view hands out re-validates to its own extent
//! and lies inside its backing; every in-range scalar decodes; out-of-range indices are errors;
//! `validate_all` agrees with decoding the tensors one by one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use simpler_core::blob::{read_blob, BlobError};

fuzz_target!(|data: &[u8]| {
    let view = match read_blob(data) {
        Ok(view) => view,
        Err(e) => {
            let _ = format!("{e} {e:?}");
            return;
        }
    };
    assert!(view.size() <= data.len());

    let mut first_error: Option<BlobError> = None;
    for i in 0..view.tensor_count() {
        match view.tensor(i) {
            Ok(t) => {
                let extent = t.extent_bytes();
                assert_eq!(t.validate(), Ok(extent), "tensor {i}: {t:?}");
                let end = t.byte_offset.checked_add(extent);
                assert!(
                    matches!(end, Some(end) if end <= t.buffer.nbytes),
                    "tensor {i} escapes its backing: offset {} + extent {extent} > nbytes {}",
                    t.byte_offset,
                    t.buffer.nbytes,
                );
            }
            Err(e) => {
                assert!(matches!(e, BlobError::Tensor { index, .. } if index == i), "{e:?}");
                let _ = format!("{e} {e:?}");
                first_error.get_or_insert(e);
            }
        }
    }
    assert!(view.tensor(view.tensor_count()).is_err());
    assert!(view.tensor(usize::MAX).is_err());

    let scalars: Vec<u64> = view.scalars().collect();
    assert_eq!(scalars.len(), view.scalar_count());
    for (i, &s) in scalars.iter().enumerate() {
        assert_eq!(view.scalar(i), Ok(s));
    }
    assert!(view.scalar(view.scalar_count()).is_err());
    assert!(view.scalar(usize::MAX).is_err());

    match first_error {
        None => assert_eq!(view.validate_all(), Ok(())),
        Some(e) => assert_eq!(view.validate_all(), Err(e)),
    }
});
