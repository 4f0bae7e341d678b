//! A string enum of the wire that keeps a value it does not know: a foreign peer (an XXL-Job
//! admin or executor of another version) may send one, and refusing it must be the reader's
//! decision with a clear message, not a failed parse of the whole message.

/// Declares `pub enum $name { $variant…, Other(String) }`, written and read as its string.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A value this version does not know, kept as it came.
            Other(String),
        }

        impl $name {
            /// The known values, in declaration order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($text => $name::$variant,)+
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Ok($name::from(text.as_str()))
            }
        }
    };
}
pub(crate) use wire_enum;
