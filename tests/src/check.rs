//! Assertions the suites share. Its own module because a `#[macro_export]` macro lands at the
//! crate root: suites name it `simpler_tests::assert_fails!`.

/// Asserts that `result` is `Err` matching `pattern` (with an optional `if` guard), and
/// panics naming the pattern and what `result` was otherwise.
///
/// ```ignore
/// assert_fails!(w.alloc_child_tensor(0, 1024), L3Error::Control { .. });
/// assert_fails!(&r, L3Error::Endpoint { endpoint, .. } if endpoint.contains("chip 0"));
/// ```
#[macro_export]
macro_rules! assert_fails {
    ($result:expr, $pattern:pat $(if $guard:expr)? $(,)?) => {
        match $result {
            Err($pattern) $(if $guard)? => {}
            other => panic!("expected Err({}), got {other:?}", stringify!($pattern)),
        }
    };
}
