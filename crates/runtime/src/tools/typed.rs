//! Tools with typed arguments: [`TypedTool`] (a trait with an async
//! `call` taking the deserialized arguments) and [`tool_fn`] (a tool from
//! a name, a description and an async closure). The arguments' JSON
//! Schema comes from `schemars` and is built once per argument type; the
//! result is anything `Serialize` (a string is sent as it is, anything
//! else as JSON).

use std::any::TypeId;
use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use parking_lot::RwLock;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Capability, Tool, ToolContext, ToolError, ToolOutput};

/// A tool whose arguments are a typed struct.
///
/// ```
/// use troupe_runtime::tools::{ToolContext, ToolError, TypedTool};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct AddArgs { a: i64, b: i64 }
/// struct Add;
/// impl TypedTool for Add {
///     type Args = AddArgs;
///     type Output = i64;
///     fn name(&self) -> &str { "add" }
///     fn description(&self) -> &str { "Adds two integers" }
///     async fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<i64, ToolError> {
///         Ok(args.a + args.b)
///     }
/// }
/// ```
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments (the model's JSON object, deserialized).
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    /// The result.
    type Output: Serialize + Send;
    /// The registered name.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// What it may do (default: reads only).
    fn capability(&self) -> Capability {
        Capability::ReadOnly
    }
    /// Runs the call.
    fn call(
        &self,
        args: Self::Args,
        ctx: &ToolContext,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        TypedTool::name(self)
    }

    fn description(&self) -> &str {
        TypedTool::description(self)
    }

    fn schema(&self) -> Value {
        schema_of::<T::Args>().as_ref().clone()
    }

    fn capability(&self) -> Capability {
        TypedTool::capability(self)
    }

    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = parse::<T::Args>(args)?;
            render(&TypedTool::call(self, args, ctx).await?)
        })
    }
}

/// A tool made by [`tool_fn`].
pub struct FnTool<A, F> {
    name: String,
    description: String,
    capability: Capability,
    schema: Arc<Value>,
    f: F,
    args: PhantomData<fn(A)>,
}

/// A tool named `name` that runs `f` on its typed arguments:
///
/// ```
/// use troupe_runtime::tools::tool_fn;
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct AddArgs { a: i64, b: i64 }
/// let add = tool_fn("add", "Adds two integers", |x: AddArgs| async move { Ok(x.a + x.b) });
/// ```
pub fn tool_fn<A, O, F, Fut>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> FnTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + Send,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
{
    FnTool {
        name: name.into(),
        description: description.into(),
        capability: Capability::ReadOnly,
        schema: schema_of::<A>(),
        f,
        args: PhantomData,
    }
}

impl<A, F> FnTool<A, F> {
    /// With this capability instead of read-only (a tool that writes or
    /// runs processes must say so: a restarted agent re-runs only
    /// read-only calls it lost).
    pub fn with_capability(mut self, capability: Capability) -> Self {
        self.capability = capability;
        self
    }
}

impl<A, O, F, Fut> Tool for FnTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + Send,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn schema(&self) -> Value {
        self.schema.as_ref().clone()
    }

    fn capability(&self) -> Capability {
        self.capability
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = parse::<A>(args)?;
            render(&(self.f)(args).await?)
        })
    }
}

fn parse<A: DeserializeOwned>(args: Value) -> Result<A, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::Schema(e.to_string()))
}

fn render<O: Serialize>(out: &O) -> Result<ToolOutput, ToolError> {
    let output = match serde_json::to_value(out) {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(e) => return Err(ToolError::Failed(format!("result not serializable: {e}"))),
    };
    Ok(ToolOutput {
        output,
        ..ToolOutput::default()
    })
}

/// The JSON Schema of `A`, built once per type: schemars' schema without
/// its `$schema` and `title` keys, an object schema when `A` has no
/// fields.
pub fn schema_of<A: JsonSchema + 'static>() -> Arc<Value> {
    static CACHE: OnceLock<RwLock<HashMap<TypeId, Arc<Value>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| RwLock::new(HashMap::new()));
    let key = TypeId::of::<A>();
    if let Some(s) = cache.read().get(&key) {
        return Arc::clone(s);
    }
    let mut schema = schemars::schema_for!(A).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        obj.entry("type").or_insert_with(|| Value::from("object"));
    }
    let schema = Arc::new(schema);
    cache.write().insert(key, Arc::clone(&schema));
    schema
}
