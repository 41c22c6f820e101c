//! Errors of the SQL layer, each with a stable code users can search for.

use thiserror::Error;

/// Result alias for the SQL layer.
pub type Result<T, E = SqlError> = std::result::Result<T, E>;

/// Everything that can be wrong with a statement before it runs.
#[derive(Debug, Error)]
pub enum SqlError {
    /// The text is not valid SQL of the Sluice dialect.
    #[error("syntax error: {0}")]
    Syntax(String),
    /// Valid syntax that the streaming engine cannot execute; names the construct.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A name that does not resolve, or resolves to the wrong kind of object.
    #[error("{0}")]
    Catalog(String),
    /// A type that does not fit where it is used; names the column and both types.
    #[error("type error: {0}")]
    Type(String),
    /// An option in a `WITH (...)` list or a `SET` that is unknown or malformed.
    #[error("invalid option: {0}")]
    Option(String),
    /// A function called with argument types none of its signatures takes
    /// (e.g. `SUM(varchar)`); names the call and the accepted forms.
    #[error("type error: {message}")]
    Signature {
        /// The call, its argument types and what the function takes.
        message: String,
        /// DataFusion's own report.
        #[source]
        source: Box<datafusion::error::DataFusionError>,
    },
    /// DataFusion rejected the query while planning it.
    #[error("planning failed: {0}")]
    Plan(datafusion::error::DataFusionError),
}

impl From<datafusion::error::DataFusionError> for SqlError {
    /// A signature mismatch is the user's type error; anything else is a
    /// planning error.
    fn from(e: datafusion::error::DataFusionError) -> Self {
        SqlError::try_signature(e).unwrap_or_else(SqlError::Plan)
    }
}

impl SqlError {
    /// A stable code for this class of error.
    pub fn code(&self) -> &'static str {
        match self {
            SqlError::Syntax(_) => "SLC-SQL-001",
            SqlError::Unsupported(_) => "SLC-SQL-002",
            SqlError::Catalog(_) => "SLC-SQL-003",
            SqlError::Type(_) | SqlError::Signature { .. } => "SLC-SQL-004",
            SqlError::Option(_) => "SLC-SQL-005",
            SqlError::Plan(_) => "SLC-SQL-006",
        }
    }
}

impl From<datafusion::sql::sqlparser::parser::ParserError> for SqlError {
    fn from(e: datafusion::sql::sqlparser::parser::ParserError) -> Self {
        SqlError::Syntax(e.to_string())
    }
}

impl From<datafusion::sql::sqlparser::tokenizer::TokenizerError> for SqlError {
    fn from(e: datafusion::sql::sqlparser::tokenizer::TokenizerError) -> Self {
        SqlError::Syntax(e.to_string())
    }
}
