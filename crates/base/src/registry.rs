//! The shape every registry enum shares (collective algorithms, neighbour strategies,
//! solver methods and options, reorderings and partitions): `ALL`, `name()` and `description()` are
//! written by hand next to the variants; [`impl_registry!`](crate::impl_registry) derives
//! `Display` and `FromStr` from them, so parsing, help text and error messages cannot drift.

/// A name that is not in a registry; its message lists the valid names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {op} '{name}' (valid: {valid})")]
pub struct UnknownAlgorithm {
    /// What was being named, e.g. `allreduce algorithm`.
    pub op: &'static str,
    /// The name given.
    pub name: String,
    /// The valid names, comma-separated.
    pub valid: String,
}

impl UnknownAlgorithm {
    /// The error for `name`, listing `valid`.
    pub fn new<'a>(op: &'static str, name: &str, valid: impl Iterator<Item = &'a str>) -> Self {
        Self {
            op,
            name: name.to_string(),
            valid: valid.collect::<Vec<_>>().join(", "),
        }
    }
}

/// Implement `Display` (the snake_case name) and `FromStr` (error: [`UnknownAlgorithm`]
/// listing every valid name) for a registry enum that has `const ALL: &[Self]` and
/// `fn name(self) -> &'static str`. `$what` names the registry in errors.
///
/// ```
/// #[derive(Debug, Clone, Copy, PartialEq)]
/// enum Colour { Red, Blue }
/// impl Colour {
///     const ALL: &'static [Colour] = &[Colour::Red, Colour::Blue];
///     fn name(self) -> &'static str {
///         match self { Colour::Red => "red", Colour::Blue => "blue" }
///     }
/// }
/// castack_base::impl_registry!(Colour, "colour");
///
/// assert_eq!("blue".parse::<Colour>(), Ok(Colour::Blue));
/// assert_eq!(Colour::Red.to_string(), "red");
/// let e = "green".parse::<Colour>().unwrap_err();
/// assert_eq!(e.to_string(), "unknown colour 'green' (valid: red, blue)");
/// ```
#[macro_export]
macro_rules! impl_registry {
    ($ty:ty, $what:expr) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::UnknownAlgorithm;

            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|a| a.name() == s)
                    .ok_or_else(|| {
                        $crate::UnknownAlgorithm::new($what, s, Self::ALL.iter().map(|a| a.name()))
                    })
            }
        }
    };
}
