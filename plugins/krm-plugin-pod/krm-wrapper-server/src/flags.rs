//! Go-style command-line flags: `-name value`, `-name=value`, `--name value`, `--name=value`;
//! booleans as `-name` or `-name=true|false`. Parsing stops at `--` (what follows is returned
//! as the entrypoint) or at the first argument that is not a flag.

/// One accepted flag.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub name: &'static str,
    pub boolean: bool,
}

impl Flag {
    pub const fn value(name: &'static str) -> Self {
        Self {
            name,
            boolean: false,
        }
    }

    pub const fn boolean(name: &'static str) -> Self {
        Self {
            name,
            boolean: true,
        }
    }
}

/// The flags found, in order, and the arguments after them.
#[derive(Debug, Default)]
pub struct Parsed {
    pub flags: Vec<(&'static str, String)>,
    /// Arguments after the flags and before `--` (or after the flags when there is no `--`).
    pub positional: Vec<String>,
    /// Everything after `--`, when `--` was given.
    pub after_dash: Option<Vec<String>>,
}

impl Parsed {
    /// The last value given for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(flag, _)| *flag == name)
            .map(|(_, value)| value.as_str())
    }

    /// Every value given for a repeatable flag.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.flags
            .iter()
            .filter(|(flag, _)| *flag == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// A boolean flag's value (false when absent).
    pub fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some_and(|v| v == "true")
    }
}

/// Parses `args` (without the program name). Flags may follow positional arguments, as with
/// cobra; `--` ends parsing.
pub fn parse(args: &[String], accepted: &[Flag]) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            parsed.after_dash = Some(args.cloned().collect());
            break;
        }
        let Some(body) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|body| !body.is_empty() && !body.starts_with('-'))
        else {
            parsed.positional.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (body, None),
        };
        let Some(flag) = accepted.iter().find(|flag| flag.name == name) else {
            return Err(format!("unknown flag: {arg}"));
        };
        let value = if flag.boolean {
            match inline.as_deref() {
                None => "true".to_owned(),
                Some("true" | "1" | "t" | "T" | "TRUE" | "True") => "true".to_owned(),
                Some("false" | "0" | "f" | "F" | "FALSE" | "False") => "false".to_owned(),
                Some(other) => {
                    return Err(format!("invalid boolean value {other:?} for flag -{name}"));
                }
            }
        } else {
            match inline {
                Some(value) => value,
                None => args
                    .next()
                    .cloned()
                    .ok_or_else(|| format!("flag needs an argument: -{name}"))?,
            }
        };
        parsed.flags.push((flag.name, value));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_and_gnu_styles() {
        let accepted = [Flag::value("port"), Flag::boolean("v")];
        let parsed = parse(
            &strings(&["-port", "1", "--port=2", "-v", "--", "fn", "--port", "x"]),
            &accepted,
        )
        .unwrap();
        assert_eq!(parsed.get("port"), Some("2"));
        assert!(parsed.is_set("v"));
        assert_eq!(parsed.after_dash.unwrap(), strings(&["fn", "--port", "x"]));
        assert!(parse(&strings(&["--nope"]), &accepted).is_err());
        assert!(parse(&strings(&["--port"]), &accepted).is_err());
        let parsed = parse(&strings(&["install", "/d"]), &accepted).unwrap();
        assert_eq!(parsed.positional, strings(&["install", "/d"]));
        assert!(parsed.after_dash.is_none());
    }
}
