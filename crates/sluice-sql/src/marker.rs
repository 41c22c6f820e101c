//! Marker functions: calls a parser rewrite puts into a join's condition
//! (an ASOF join's match, a temporal join's `AS OF` time) so that DataFusion
//! resolves their arguments like any expression, and the planner then takes
//! them apart. A marker is never executed: evaluating one is an error.

use arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// A boolean marker named `name`; `what` finishes "`name`() marks ...".
#[derive(Debug, PartialEq, Eq, Hash)]
struct Marker {
    name: &'static str,
    what: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for Marker {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        exec_err!(
            "{}() marks {} and cannot be evaluated",
            self.name,
            self.what
        )
    }
}

/// The marker `name` taking `signature`, to register in the planning
/// session; `what` is what it marks, for the error if it is ever run.
pub(crate) fn marker_udf(
    name: &'static str,
    what: &'static str,
    signature: Signature,
) -> ScalarUDF {
    ScalarUDF::new_from_impl(Marker {
        name,
        what,
        signature,
    })
}
