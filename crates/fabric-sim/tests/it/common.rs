//! What the modules share.

/// Fails the test unless the model's `got` is within 5% of the fact `want`.
pub(crate) fn within_5pct(what: &str, got: f64, want: f64) {
    let rel = (got - want).abs() / want;
    assert!(
        rel <= 0.05,
        "{what}: model {got:.4e}, fact {want:.4e} ({:.1}% off)",
        rel * 100.0
    );
}
