//! The proof that a refusal was decided in [`super`]: a
//! [`Denial`](crate::caps::Denial) cannot be built without one, and only
//! the authority module can make one.

/// Made only by [`super`] (its field is visible there alone); neither
/// `Clone` nor `Copy`, so a refusal's token cannot be taken for another.
#[derive(Debug, PartialEq, Eq)]
pub struct Decided(pub(super) ());
