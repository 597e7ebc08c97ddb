//! Printing an error with its causes: [`ErrorChain`].
//!
//! Every error type of the workspace says what failed at its own level and returns the error
//! it wraps from [`Error::source`]; the whole story is the chain, walked from the outermost
//! error to the root cause.

use std::error::Error;
use std::fmt;

/// An error and its [`source`](Error::source) chain, printed as `outer: cause: root cause`.
///
/// A cause whose message the message before it already ends with is not printed again: a few
/// messages embed their cause's (`TensorError::Descriptor` reads `buffer: <descriptor
/// error>`, `WorkerError::Hbg` reads `host-built run: <hbg error>`).
///
/// ```
/// # use simpler_host::ErrorChain;
/// # use simpler_core::{DescriptorError, TensorError};
/// let e = TensorError::Descriptor(DescriptorError::ZeroGeneration);
/// assert_eq!(
///     ErrorChain(&e).to_string(),
///     "buffer: identity generation is 0 (uninitialised)"
/// );
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            let text = e.to_string();
            if !last.ends_with(&text) {
                write!(f, ": {text}")?;
            }
            last = text;
            cause = e.source();
        }
        Ok(())
    }
}
