//! The numerical guards every method and estimate shares: a breakdown value
//! ([`KrylovError::Breakdown`]: method, iteration, quantity, value), the finiteness test of
//! a reduced value and the curvature test of a step.

use crate::KrylovError;

/// A breakdown of `method` at `iteration`: `quantity` took the unusable `value`.
pub(crate) fn breakdown(
    method: &'static str,
    iteration: usize,
    quantity: &'static str,
    value: f64,
) -> KrylovError {
    KrylovError::Breakdown {
        method: method.into(),
        iteration,
        quantity: quantity.into(),
        value,
    }
}

/// `value` if finite, else a breakdown (NaN/Inf detected at once).
pub(crate) fn finite_or(
    method: &'static str,
    value: f64,
    iteration: usize,
    quantity: &'static str,
) -> Result<f64, KrylovError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(breakdown(method, iteration, quantity, value))
    }
}

/// A curvature within this multiple of `||p||^2 ||A||` of zero is at rounding level: the
/// computed `p^T A p` of an SPD matrix carries an absolute error of about
/// `nnz_row eps ||p||^2 ||A||`, so a non-positive value that small says the direction (or
/// the residual it came from) has vanished into rounding, not that A is indefinite.
pub(crate) const ROUNDING_CURVATURE: f64 = 100.0 * f64::EPSILON;

/// What a step's curvature allows ([`curvature`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Curvature {
    /// Positive: take the step with this value.
    Step(f64),
    /// Non-positive at rounding level: no step; check the true residual (converged if it
    /// passes, else replace the residual and restart the directions).
    Rounding,
}

/// The curvature `value` of `quantity` at iteration `it`: positive is a step; non-positive
/// within [`ROUNDING_CURVATURE`] `* scale` (`scale` an estimate of `||p||^2 ||A||`) is
/// [`Curvature::Rounding`] unless the direction was just (re)started from the residual
/// (`restart`: then `r^T A r <= 0` for a residual that missed the target, a real
/// breakdown); anything else (NaN/Inf included) is a breakdown.
pub(crate) fn curvature(
    method: &'static str,
    value: f64,
    it: usize,
    quantity: &'static str,
    scale: f64,
    restart: bool,
) -> Result<Curvature, KrylovError> {
    if value.is_finite() && value > 0.0 {
        Ok(Curvature::Step(value))
    } else if value.is_finite() && !restart && value.abs() <= ROUNDING_CURVATURE * scale {
        Ok(Curvature::Rounding)
    } else {
        Err(breakdown(method, it, quantity, value))
    }
}
