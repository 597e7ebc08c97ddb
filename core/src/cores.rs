//! Which cores a task occupies. A task names a kernel per slot of one cluster (AIC, AIV0, AIV1);
//! the set of active slots decides the resource shape the scheduler dispatches it as.

use bitflags::bitflags;

/// The two kinds of compute core.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoreType {
    /// Cube core (matrix multiply).
    Aic = 0,
    /// Vector core.
    Aiv = 1,
}

bitflags! {
    /// The kernel slots a task activates on one cluster (1 AIC + 2 AIV).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct ActiveMask: u8 {
        /// The cube core.
        const AIC = 0b001;
        /// The left vector core.
        const AIV0 = 0b010;
        /// The right vector core.
        const AIV1 = 0b100;
    }
}

/// The unit the scheduler allocates for a task.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceShape {
    /// One AIC core.
    Aic = 0,
    /// One AIV core.
    Aiv = 1,
    /// Several cores of one cluster, dispatched and completed as a unit.
    Mix = 2,
    /// No core: a dependency-only node the scheduler completes inline.
    Dummy = 3,
}

impl ResourceShape {
    /// Shapes that occupy cores (`Dummy` does not).
    pub const DISPATCHABLE: [ResourceShape; 3] = [Self::Aic, Self::Aiv, Self::Mix];
}

impl ActiveMask {
    /// The shape a task with these slots is dispatched as: no slot is DUMMY, two or more is MIX,
    /// otherwise the single slot's core type.
    pub const fn shape(self) -> ResourceShape {
        match self.bits().count_ones() {
            0 => ResourceShape::Dummy,
            1 if self.contains(Self::AIC) => ResourceShape::Aic,
            1 => ResourceShape::Aiv,
            _ => ResourceShape::Mix,
        }
    }

    /// An AIV1-only task runs on AIV0 (any free vector core); a MIX task keeps its lanes.
    pub const fn normalized(self) -> Self {
        if self.bits() == Self::AIV1.bits() {
            Self::AIV0
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_follows_active_slots() {
        assert_eq!(ActiveMask::empty().shape(), ResourceShape::Dummy);
        assert_eq!(ActiveMask::AIC.shape(), ResourceShape::Aic);
        assert_eq!(ActiveMask::AIV0.shape(), ResourceShape::Aiv);
        assert_eq!(ActiveMask::AIV1.shape(), ResourceShape::Aiv);
        assert_eq!(
            (ActiveMask::AIV0 | ActiveMask::AIV1).shape(),
            ResourceShape::Mix
        );
        assert_eq!(
            (ActiveMask::AIC | ActiveMask::AIV1).shape(),
            ResourceShape::Mix
        );
        assert_eq!(ActiveMask::all().shape(), ResourceShape::Mix);
    }

    #[test]
    fn aiv1_alone_normalizes_to_aiv0() {
        assert_eq!(ActiveMask::AIV1.normalized(), ActiveMask::AIV0);
        let mix = ActiveMask::AIC | ActiveMask::AIV1;
        assert_eq!(mix.normalized(), mix);
    }
}
