//! What a warm bind can take from the last one: the Graph staging's bytes, and the decisions
//! that accepted each Graph submission.
//!
//! A served model binds the same orchestration over the same staged entry bind after bind, so
//! its Graph submissions arrive in the same order with the same boundary tensors (the same
//! addresses, views, owners and versions: the mirror's rings and heap restart each bind). The
//! staging keeps its bytes across binds ([`StagingBytes`]), and the [`Memo`] keeps, per
//! submission of the last bind, its key, where its boundary was staged, its tags and how it
//! was accepted. A submission that matches the last bind's at the same position, with the
//! boundary's bytes found already staged there, is accepted as it was then without comparing
//! its boundary's layout again (`GraphBoundary::matches_args`, the retained Definitions' scan)
//! and without writing its staging.
//!
//! Why that is the same decision: the acceptance of a submission is a function of its key,
//! its boundary (tensors and tags), its scalar count, the submissions before it in the bind,
//! the callable, the retention settings and the retained Definitions. The memo is used only
//! along an unbroken prefix of the last bind's submissions (every earlier one matched), for
//! the same callable and settings, while no retained Definition has been dropped since
//! (`Kept::generation`; a retained one added since comes after every one the last bind
//! matched, and the scan takes the first match), and only for decisions that replayed (a
//! known key, or a retained Definition without verification): a recording, an inline run or
//! a staging failure ends the prefix. The boundary's bytes are compared with the staging
//! itself, so anything that rewrote those bytes since (a replayed image relocated into them)
//! can only make the comparison fail; [`Memo::forget`] is called there all the same.

use super::GraphRetention;
use simpler_core::orchestrator::TaskArg;

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
        while self.len < len {
            self.push(&[0]);
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
    /// Whether the `n` tensors of `args` lie back to back at `at` (at or past this bind's
    /// end, where an earlier bind left them).
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

/// One accepted submission of the last bind.
#[derive(Clone, Copy, Debug)]
struct Remembered {
    key: u64,
    /// Where its boundary's tensors were staged.
    at: usize,
    tensors: usize,
    scalars: usize,
    /// Where its tags start in the memo's tag list.
    tags_at: usize,
    accepted: Accepted,
}

/// What the callable's decisions rest on besides the submissions themselves.
type Basis = (usize, GraphRetention, u64);

/// The last bind's accepted Graph submissions, and this bind's as they are accepted: see the
/// module's documentation.
#[derive(Default)]
pub(super) struct Memo {
    last: Vec<Remembered>,
    last_tags: Vec<u8>,
    now: Vec<Remembered>,
    now_tags: Vec<u8>,
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
        std::mem::swap(&mut self.last, &mut self.now);
        std::mem::swap(&mut self.last_tags, &mut self.now_tags);
        self.now.clear();
        self.now_tags.clear();
        self.following = self.basis == Some(basis) && !self.last.is_empty();
        self.basis = Some(basis);
        self.keeping = true;
    }

    /// Drops everything remembered (the staging was rewritten outside a bind).
    pub(super) fn forget(&mut self) {
        self.last.clear();
        self.now.clear();
        self.basis = None;
        self.following = false;
        self.keeping = false;
    }

    /// The last bind's decision for this bind's next submission, if it applies: the same key,
    /// boundary (its tensors found staged at `at`, the same tags) and scalar count as the
    /// last bind's submission at this position, every earlier one having matched too.
    /// Otherwise the bind stops following the last one.
    pub(super) fn recall(
        &mut self,
        key: u64,
        at: usize,
        boundary: &[TaskArg],
        scalars: usize,
        staging: &StagingBytes,
    ) -> Option<Accepted> {
        if !self.following {
            return None;
        }
        let found = self.last.get(self.now.len()).filter(|m| {
            m.key == key
                && m.at == at
                && m.tensors == boundary.len()
                && m.scalars == scalars
                && self.last_tags[m.tags_at..m.tags_at + m.tensors]
                    .iter()
                    .zip(boundary)
                    .all(|(&t, a)| t == a.tag as u8)
                && staging.holds_at(at, boundary)
        });
        self.following = found.is_some();
        found.map(|m| m.accepted)
    }

    /// Notes how this bind's next submission was accepted: `Some` for a decision the next
    /// bind may apply, `None` for one it may not (nothing after it is remembered).
    pub(super) fn note(
        &mut self,
        key: u64,
        at: usize,
        boundary: &[TaskArg],
        scalars: usize,
        accepted: Option<Accepted>,
    ) {
        match accepted {
            Some(accepted) if self.keeping => {
                // `last` and `now` trade places every bind: both grow together, so a bind
                // that remembers no more than the last two did allocates nothing.
                grow_together(&mut self.now, &mut self.last, 1);
                grow_together(&mut self.now_tags, &mut self.last_tags, boundary.len());
                self.now.push(Remembered {
                    key,
                    at,
                    tensors: boundary.len(),
                    scalars,
                    tags_at: self.now_tags.len(),
                    accepted,
                });
                self.now_tags.extend(boundary.iter().map(|a| a.tag as u8));
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
