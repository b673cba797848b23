//! Newton basis `s_{j+1} = (A - theta_j) s_j` with Leja-ordered shifts.
//!
//! The shifts are Ritz values from the spectral estimate ([`crate::eig`]) in Leja order
//! (first the largest in magnitude, then each maximising the product of distances to the
//! ones already taken), so consecutive factors cover the spectrum evenly and the basis
//! stays well conditioned. With fewer Ritz values than `k` the sequence repeats.
//! Change of basis: `A s_j = s_{j+1} + theta_j s_j` (theta on the diagonal of `T`, ones
//! below it).

/// Leja-ordered shifts.
#[derive(Debug, Clone, PartialEq)]
pub struct Newton {
    shifts: Vec<f64>,
}

impl Newton {
    /// Shifts from `ritz` (any order, at least one value), reordered by Leja's rule.
    ///
    /// # Panics
    ///
    /// When `ritz` is empty.
    #[track_caller]
    pub fn new(ritz: &[f64]) -> Self {
        assert!(!ritz.is_empty(), "Newton basis needs at least one shift");
        Self {
            shifts: leja_order(ritz),
        }
    }

    /// The shifts in the order they are applied.
    pub fn shifts(&self) -> &[f64] {
        &self.shifts
    }

    /// Shift of step `j`.
    pub(super) fn shift(&self, j: usize) -> f64 {
        self.shifts[j % self.shifts.len()]
    }

    /// Column `j` of `T` (`k + 1` rows, stride `k`).
    pub(super) fn change_of_basis_column(&self, j: usize, k: usize, t: &mut [f64]) {
        t[j * k + j] = self.shift(j);
        t[(j + 1) * k + j] = 1.0;
    }
}

/// Leja order of `points`: the largest magnitude first, then repeatedly the point that
/// maximises the product of distances to those already chosen (a log-sum, so it does
/// not overflow). Duplicates end up last.
pub(super) fn leja_order(points: &[f64]) -> Vec<f64> {
    let mut rest: Vec<f64> = points.to_vec();
    let mut out = Vec::with_capacity(rest.len());
    while !rest.is_empty() {
        let score = |z: f64| -> f64 {
            if out.is_empty() {
                z.abs()
            } else {
                out.iter()
                    .map(|&c: &f64| (z - c).abs().max(1e-300).ln())
                    .sum()
            }
        };
        let mut best = 0;
        for i in 1..rest.len() {
            if score(rest[i]) > score(rest[best]) {
                best = i;
            }
        }
        out.push(rest.swap_remove(best));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leja_order_starts_at_the_largest_and_alternates() {
        let o = leja_order(&[0.1, 0.5, 1.0, 1.9, 1.5]);
        assert_eq!(o[0], 1.9);
        assert_eq!(o[1], 0.1);
        assert_eq!(o.len(), 5);
        let mut sorted = o.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(sorted, vec![0.1, 0.5, 1.0, 1.5, 1.9]);
    }
}
