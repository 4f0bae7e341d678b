//! `glueType`: how a trigger's job is to be run, and which interpreter runs each script type.
//! The admin picks the type from the interpreter and the agent the interpreter from the type,
//! both through this one table.

use super::wire_enum::wire_enum;

wire_enum! {
    /// XXL-Job's `GlueTypeEnum` names, plus jobfleet's Perl.
    pub enum GlueType {
        /// A handler compiled into a Java executor, named by `executorHandler`.
        Bean => "BEAN",
        /// Groovy source, run inside a Java executor.
        Groovy => "GLUE_GROOVY",
        Shell => "GLUE_SHELL",
        Python => "GLUE_PYTHON",
        Python2 => "GLUE_PYTHON2",
        Php => "GLUE_PHP",
        Nodejs => "GLUE_NODEJS",
        Powershell => "GLUE_POWERSHELL",
        /// jobfleet's own: XXL-Job has no Perl glue. A stock executor answers a name it does
        /// not know with "glueType[GLUE_PERL] is not valid.", so a Perl script is refused
        /// there instead of being run by bash as `GLUE_SHELL` would have it.
        Perl => "GLUE_PERL",
        /// jobfleet's own: an HTTP request the agent sends itself, no process; `glueSource`
        /// is the request as JSON (`HttpRequest`). A stock executor refuses the unknown name.
        Http => "GLUE_HTTP",
    }
}

impl GlueType {
    /// The interpreter a jobfleet agent runs this type with when the trigger names none;
    /// `None` for types that need a Java executor and for unknown ones.
    pub fn interpreter(&self) -> Option<&'static str> {
        match self {
            GlueType::Shell => Some("bash"),
            // XXL-Job runs GLUE_PYTHON2 with `python`; hosts rarely have Python 2 any more.
            GlueType::Python | GlueType::Python2 => Some("python3"),
            GlueType::Nodejs => Some("node"),
            GlueType::Php => Some("php"),
            GlueType::Powershell => Some("pwsh"),
            GlueType::Perl => Some("perl"),
            GlueType::Bean | GlueType::Groovy | GlueType::Http | GlueType::Other(_) => None,
        }
    }

    /// The type a script for `interpreter` travels as: an XXL-Job executor that gets it runs
    /// the same language or refuses the trigger. `sh` and `bash` scripts are `GLUE_SHELL`
    /// (XXL-Job runs them with bash; jobfleet agents read `interpreter`).
    pub fn for_interpreter(interpreter: &str) -> GlueType {
        match interpreter {
            "python3" => GlueType::Python,
            "node" => GlueType::Nodejs,
            "php" => GlueType::Php,
            "pwsh" => GlueType::Powershell,
            "perl" => GlueType::Perl,
            _ => GlueType::Shell,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_script_interpreter_travels_as_a_type_that_runs_it() {
        for interpreter in ["bash", "python3", "node", "php", "pwsh", "perl"] {
            let glue = GlueType::for_interpreter(interpreter);
            assert_eq!(glue.interpreter(), Some(interpreter), "{glue}");
        }
        assert_eq!(GlueType::for_interpreter("sh"), GlueType::Shell);
    }

    #[test]
    fn unknown_types_are_kept_not_refused_by_the_parser() {
        let glue: GlueType = serde_json::from_str(r#""GLUE_RUBY""#).unwrap();
        assert_eq!(glue, GlueType::Other("GLUE_RUBY".into()));
        assert_eq!(serde_json::to_string(&glue).unwrap(), r#""GLUE_RUBY""#);
        assert_eq!(glue.interpreter(), None);
        for known in GlueType::KNOWN {
            let text = serde_json::to_string(known).unwrap();
            assert_eq!(&serde_json::from_str::<GlueType>(&text).unwrap(), known);
        }
    }
}
