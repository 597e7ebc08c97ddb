//! What a warm bind can take from the last one: the Graph staging's bytes, and the decisions
//! that accepted each Graph submission.
//!
//! A served model binds the same orchestration over the same staged entry bind after bind, so
//! its Graph submissions arrive in the same order with the same boundary tensors (the same
//! addresses, views, owners and versions: the mirror's rings and heap restart each bind). The
//! staging keeps its bytes across binds ([`StagingBytes`]), and the [`Memo`] keeps, per
//! submission of the last bind, its key, where its boundary was staged, its tags, the leading
//! words of each boundary tensor that views of one layout differ in
//! ([`TaskTensor::VIEW_WORDS`]: buffer, owner, start, version, rank) and how it was accepted.
//! A submission that matches the last bind's at the same position is accepted as it was then
//! without comparing its boundary's layout again (`GraphBoundary::matches_args`, the retained
//! Definitions' scan) and without writing its staging.
//!
//! What "matches" means: the same key, tags and scalar count; each tensor's view words equal
//! to the remembered ones; and each tensor's remaining words (layout and padding) equal to
//! the same tensor of the key's first invocation, as the in-flight entry holds it (this
//! bind's copy for a later submission of the key; for the first one, the last bind's copy,
//! which the entry still holds when the submission arrives). Only submissions whose tensors
//! equal their key's first invocation in those words are remembered, so a match means the
//! tensors are byte for byte the ones the last bind staged at the same offset: the staging
//! holds them already (checked in debug builds). The memo reads 40 bytes per boundary tensor
//! and the entries' copies, which the bind reads anyway, instead of the 128 staged; a bind
//! that follows the last one throughout writes nothing to it.
//!
//! Why that is the same decision: the acceptance of a submission is a function of its key,
//! its boundary (tensors and tags), its scalar count, the submissions before it in the bind,
//! the callable, the retention settings and the retained Definitions. The memo is used only
//! along an unbroken prefix of the last bind's submissions (every earlier one matched), for
//! the same callable and settings, while no retained Definition has been dropped since
//! (`Kept::generation`; a retained one added since comes after every one the last bind
//! matched, and the scan takes the first match), and only for decisions that replayed (a
//! known key, or a retained Definition without verification): a recording, an inline run or
//! a staging failure ends the prefix. Between two binds of a slot nothing writes the staging
//! below the last bind's boundaries but a replayed image's relocation, which calls
//! [`Memo::forget`].

use super::GraphRetention;
use simpler_core::orchestrator::TaskArg;
use simpler_core::TaskTensor;

/// The Graph staging's bytes: a byte buffer whose contents outlive [`Self::clear`], so that a
/// bind staging what the last one staged at the same place finds it there
/// ([`Self::holds_at`]) and skips the write ([`Self::skip`]). It reads as the bytes staged so
/// far in this bind.
#[derive(Default)]
pub(crate) struct StagingBytes {
    /// Every byte staged at some bind; the first `len` are this bind's.
    bytes: Vec<u8>,
    len: usize,
}

impl StagingBytes {
    /// Starts a bind: nothing staged, the last bind's bytes kept behind.
    pub(super) fn clear(&mut self) {
        self.len = 0;
    }
    /// Forgets bytes past `len`.
    pub(super) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    /// Pads with zero bytes up to `len` (no-op when already there).
    pub(super) fn pad_to(&mut self, len: usize) {
        const ZEROS: [u8; 64] = [0; 64];
        while self.len < len {
            self.push(&ZEROS[..(len - self.len).min(ZEROS.len())]);
        }
    }
    /// Appends `src`.
    pub(super) fn push(&mut self, src: &[u8]) {
        let end = self.len + src.len();
        let overlap = self.bytes.len().min(end).saturating_sub(self.len);
        self.bytes[self.len..self.len + overlap].copy_from_slice(&src[..overlap]);
        self.bytes.extend_from_slice(&src[overlap..]);
        self.len = end;
    }
    /// Whether the tensors of `args` lie back to back at `at` (at or past this bind's end,
    /// where an earlier bind left them): the memo's soundness, checked in debug builds.
    pub(super) fn holds_at(&self, at: usize, args: &[TaskArg]) -> bool {
        const SIZE: usize = core::mem::size_of::<simpler_core::TaskTensor>();
        at >= self.len
            && self
                .bytes
                .get(at..at + args.len() * SIZE)
                .is_some_and(|held| {
                    held.chunks_exact(SIZE)
                        .zip(args)
                        .all(|(h, a)| h == bytemuck::bytes_of(&a.tensor))
                })
    }
    /// Takes the next `n` bytes, which [`Self::holds_at`] found to be what this bind stages.
    pub(super) fn skip(&mut self, n: usize) {
        assert!(
            self.len + n <= self.bytes.len(),
            "skipped past the staged bytes"
        );
        self.len += n;
    }
}

impl core::ops::Deref for StagingBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl core::ops::DerefMut for StagingBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

/// How one Graph submission was accepted, in a form the next bind can apply as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Accepted {
    /// A later submission of a key this bind had begun, on that key's entry.
    Again(usize),
    /// The first submission of a key, replaying retained Definition `0` (on the bind's next
    /// entry).
    Retained(usize),
}

/// The view words of a tensor ([`TaskTensor::VIEW_WORDS`]).
type ViewWords = [u64; TaskTensor::VIEW_WORDS];

/// The words of `t`: its view words, then the rest.
fn words(t: &TaskTensor) -> &[u64; 16] {
    bytemuck::cast_ref(t)
}

/// Whether `a` and `b` agree past their view words (layout and padding).
pub(super) fn same_past_view(a: &TaskTensor, b: &TaskTensor) -> bool {
    words(a)[TaskTensor::VIEW_WORDS..] == words(b)[TaskTensor::VIEW_WORDS..]
}

/// One accepted submission of the last bind.
#[derive(Clone, Copy, Debug)]
struct Remembered {
    key: u64,
    /// Where its boundary's tensors were staged.
    at: usize,
    tensors: usize,
    scalars: usize,
    /// Where its tags and its tensors' view words start in the memo's lists.
    from: usize,
    accepted: Accepted,
    /// The in-flight entry it was accepted on.
    entry: usize,
}

/// One bind's remembered submissions: per submission a [`Remembered`], per boundary tensor
/// its tag and view words.
#[derive(Default)]
struct Binding {
    items: Vec<Remembered>,
    tags: Vec<u8>,
    views: Vec<ViewWords>,
}

impl Binding {
    fn clear(&mut self) {
        self.items.clear();
        self.tags.clear();
        self.views.clear();
    }
    /// Keeps the first `n` submissions.
    fn truncate(&mut self, n: usize) {
        if let Some(m) = self.items.get(n) {
            self.tags.truncate(m.from);
            self.views.truncate(m.from);
            self.items.truncate(n);
        }
    }
}

/// What the callable's decisions rest on besides the submissions themselves.
type Basis = (usize, GraphRetention, u64);

/// The last bind's accepted Graph submissions, and this bind's as they are accepted: see the
/// module's documentation.
#[derive(Default)]
pub(super) struct Memo {
    last: Binding,
    now: Binding,
    /// Submissions this bind has noted.
    pos: usize,
    /// Whether `now` holds this bind's submissions; until then they are `last`'s first `pos`
    /// (it followed the last bind all along), and nothing is copied.
    copied: bool,
    /// The last bind's basis, then this bind's.
    basis: Option<Basis>,
    /// Whether this bind's submissions so far were the last bind's.
    following: bool,
    /// Whether this bind's submissions so far were all remembered (a prefix is kept).
    keeping: bool,
}

impl Memo {
    /// Starts a bind on `basis` (callable, retention settings, retained Definitions' drop
    /// generation): the bind before becomes the one to follow, if it rested on the same.
    pub(super) fn begin(&mut self, basis: Basis) {
        if self.copied {
            std::mem::swap(&mut self.last, &mut self.now);
        } else {
            // The bind before followed its own predecessor up to `pos`: that prefix was its.
            self.last.truncate(self.pos);
        }
        self.now.clear();
        self.pos = 0;
        self.copied = false;
        self.following = self.basis == Some(basis) && !self.last.items.is_empty();
        self.basis = Some(basis);
        self.keeping = true;
    }

    /// Drops everything remembered (the staging was rewritten outside a bind).
    pub(super) fn forget(&mut self) {
        self.last.clear();
        self.now.clear();
        self.pos = 0;
        // `now` (empty) is what the next bind follows: nothing.
        self.copied = true;
        self.basis = None;
        self.following = false;
        self.keeping = false;
    }

    /// The last bind's decision for this bind's next submission, and the entry it was taken
    /// on, if the submission has the last one's key, staging offset and counts at this
    /// position (every earlier one having matched too); the caller then confirms its tensors
    /// against the entry's first invocation ([`Self::confirm`]). A miss stops the following.
    pub(super) fn recall(
        &mut self,
        key: u64,
        at: usize,
        boundary: &[TaskArg],
        scalars: usize,
    ) -> Option<(Accepted, usize)> {
        if !self.following {
            return None;
        }
        let found = self.last.items.get(self.pos).filter(|m| {
            m.key == key && m.at == at && m.tensors == boundary.len() && m.scalars == scalars
        });
        self.following = found.is_some();
        found.map(|m| (m.accepted, m.entry))
    }

    /// Whether the recalled submission's tensors are the remembered ones: each tag and view
    /// word as remembered, every other word as in `first` (the same tensor of its key's first
    /// invocation, as its entry holds it). If not, the bind stops following the last one.
    pub(super) fn confirm(&mut self, boundary: &[TaskArg], first: &[TaskTensor]) -> bool {
        const V: usize = TaskTensor::VIEW_WORDS;
        let Some(m) = self.last.items.get(self.pos) else {
            self.following = false;
            return false;
        };
        let range = m.from..m.from + m.tensors;
        let mut diff = (first.len() != boundary.len()) as u64;
        if diff == 0 {
            for (((a, f), v), &t) in boundary
                .iter()
                .zip(first)
                .zip(&self.last.views[range.clone()])
                .zip(&self.last.tags[range])
            {
                let (w, f) = (words(&a.tensor), words(f));
                diff |= u64::from(t ^ a.tag as u8);
                for j in 0..V {
                    diff |= w[j] ^ v[j];
                }
                for j in V..16 {
                    diff |= w[j] ^ f[j];
                }
            }
        }
        self.following = diff == 0;
        self.following
    }

    /// Notes how this bind's next submission was accepted: `Some` (with its entry) for a
    /// decision the next bind may apply, `None` for one it may not (nothing after it is
    /// remembered). `recalled`: accepted by [`Self::recall`] and [`Self::confirm`]. A remembered decision's tensors
    /// must equal the entry's first invocation past their view words.
    pub(super) fn note(
        &mut self,
        key: u64,
        at: usize,
        boundary: &[TaskArg],
        scalars: usize,
        accepted: Option<(Accepted, usize)>,
        recalled: bool,
    ) {
        self.pos += 1;
        if recalled && !self.copied {
            // Still the last bind's prefix: nothing to write.
            return;
        }
        if !self.copied {
            // The last bind's prefix this bind followed becomes its own, then it goes on.
            let n = self.pos - 1;
            let upto = self
                .last
                .items
                .get(n)
                .map_or(self.last.tags.len(), |m| m.from);
            grow_together(&mut self.now.items, &mut self.last.items, n);
            self.now.items.extend_from_slice(&self.last.items[..n]);
            grow_together(&mut self.now.tags, &mut self.last.tags, upto);
            self.now.tags.extend_from_slice(&self.last.tags[..upto]);
            grow_together(&mut self.now.views, &mut self.last.views, upto);
            self.now.views.extend_from_slice(&self.last.views[..upto]);
            self.copied = true;
        }
        match accepted {
            Some((accepted, entry)) if self.keeping => {
                // `last` and `now` trade places from bind to bind: both grow together, so a
                // bind that remembers no more than the last two did allocates nothing.
                grow_together(&mut self.now.items, &mut self.last.items, 1);
                grow_together(&mut self.now.tags, &mut self.last.tags, boundary.len());
                grow_together(&mut self.now.views, &mut self.last.views, boundary.len());
                self.now.items.push(Remembered {
                    key,
                    at,
                    tensors: boundary.len(),
                    scalars,
                    from: self.now.tags.len(),
                    accepted,
                    entry,
                });
                self.now.tags.extend(boundary.iter().map(|a| a.tag as u8));
                self.now.views.extend(boundary.iter().map(|a| {
                    let mut v = [0u64; TaskTensor::VIEW_WORDS];
                    v.copy_from_slice(&words(&a.tensor)[..TaskTensor::VIEW_WORDS]);
                    v
                }));
            }
            _ => {
                self.keeping = false;
                self.following = false;
            }
        }
    }
}

/// Makes room for `more` elements in `now`, and as much in `other`.
fn grow_together<T>(now: &mut Vec<T>, other: &mut Vec<T>, more: usize) {
    if now.len() + more > now.capacity() {
        let want = (now.len() + more).max(2 * now.capacity()).max(64);
        now.reserve_exact(want - now.len());
    }
    if other.capacity() < now.capacity() {
        other.reserve_exact(now.capacity() - other.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_bytes_keep_the_last_binds_bytes_past_the_end() {
        let mut s = StagingBytes::default();
        s.push(&[1, 2, 3, 4]);
        s.clear();
        assert!(s.is_empty(), "a new bind reads nothing staged");
        // Part over the old bytes, part past them.
        s.push(&[9]);
        s.pad_to(2);
        s.push(&[7, 7, 7, 7]);
        assert_eq!(&s[..], &[9, 0, 7, 7, 7, 7]);
        s.truncate(3);
        assert_eq!(&s[..], &[9, 0, 7]);
        // The bytes past the end are still there to be skipped over.
        s.skip(2);
        assert_eq!(&s[..], &[9, 0, 7, 7, 7]);
    }

    #[test]
    #[should_panic(expected = "skipped past the staged bytes")]
    fn skipping_past_every_staged_byte_is_refused() {
        let mut s = StagingBytes::default();
        s.push(&[1, 2]);
        s.clear();
        s.skip(3);
    }
}
