//! Why an event cannot be defined: what is wrong with its fields or its
//! print format ([`DefError`]), or with the event as a whole
//! ([`EventError`]).

/// What is wrong with an event definition (its fields or print format).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefError {
    /// The system or event name is not a C identifier.
    #[error("system and event names must be C identifiers")]
    EventName,
    /// A field name is not a C identifier.
    #[error("field name {0:?} is not a C identifier")]
    FieldName(String),
    /// A field name is one of the common fields' (or starts `common_`).
    #[error("field name {0:?} is reserved")]
    ReservedField(String),
    /// Two fields have the same name.
    #[error("duplicate field {0:?}")]
    DuplicateField(String),
    /// `char[N]` with N not in 1..=4096.
    #[error("bad array length in {0:?}")]
    ArrayLength(String),
    /// A field type monfs does not lay out.
    #[error("unsupported field type {0:?} (use u8..u64, s8..s64, int, long, char[N] or __data_loc char[])")]
    FieldType(String),
    /// The fields end beyond 64 KiB.
    #[error("event too large")]
    TooLarge,
    /// The print format does not start with a quoted string.
    #[error("the print format must start with a quoted string")]
    NoFormatString,
    /// A backslash escape the print format interpreter does not know.
    #[error("unsupported escape \\{0}")]
    Escape(char),
    /// A `%` conversion the interpreter does not know.
    #[error("unsupported conversion %{0}")]
    Conversion(char),
    /// A print argument names no field.
    #[error("unknown field {0:?} in print format")]
    UnknownField(String),
    /// `__get_str()` of a field that is not a `__data_loc char[]`.
    #[error("__get_str({0}) needs a __data_loc char[] field")]
    GetStrField(String),
    /// A print argument of another shape than `REC->f` or `__get_str(f)`.
    #[error("unsupported print argument {0:?} (use REC->field or __get_str(field))")]
    PrintArg(String),
    /// Conversions and arguments do not pair up.
    #[error("print format has {convs} conversions but {args} arguments")]
    ArgCount {
        /// `%` conversions in the format.
        convs: usize,
        /// Arguments after it.
        args: usize,
    },
    /// `%s` for a number or a number conversion for a string.
    #[error("conversion %{conv} does not fit field {field}")]
    ConversionField {
        /// The conversion character.
        conv: char,
        /// The field's name.
        field: String,
    },
}

/// Why an event could not be defined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Its definition is wrong.
    #[error("{system}:{name}: {err}")]
    Def {
        /// The event's system.
        system: String,
        /// The event's name.
        name: String,
        /// What is wrong.
        err: DefError,
    },
    /// An event of that name exists.
    #[error("duplicate event {system}:{name}")]
    Duplicate {
        /// The event's system.
        system: String,
        /// The event's name.
        name: String,
    },
    /// Every event id is taken.
    #[error("out of event ids")]
    OutOfIds,
}
