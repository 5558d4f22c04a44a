//! Dispatch semantics: ordering, short-circuit, default decisions, scoped delivery,
//! containment, and unwinding.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use dsh_kernel::{
    BoxError, BoxFuture, Context, EmitEvent, Event, ListenOptions, ParallelEvent, SerialEvent,
    WaterfallEvent,
};
use pretty_assertions::assert_eq;

struct Note;
impl Event for Note {
    const NAME: &'static str = "test/note";
    type Payload = String;
}
impl EmitEvent for Note {}

struct Step;
impl Event for Step {
    const NAME: &'static str = "test/step";
    type Payload = u32;
}
impl SerialEvent for Step {}

struct Flush;
impl Event for Flush {
    const NAME: &'static str = "test/flush";
    type Payload = ();
}
impl ParallelEvent for Flush {}

struct Decide;
impl Event for Decide {
    const NAME: &'static str = "test/decide";
    type Payload = String;
}
impl WaterfallEvent for Decide {
    type Output = Vec<String>;
}

type Trace = Arc<Mutex<Vec<String>>>;

fn trace() -> Trace {
    Arc::new(Mutex::new(Vec::new()))
}

fn push(t: &Trace, s: impl Into<String>) {
    t.lock().unwrap().push(s.into());
}

fn taken(t: &Trace) -> Vec<String> {
    std::mem::take(&mut *t.lock().unwrap())
}

fn default_decision<'a>(p: &'a String) -> BoxFuture<'a, Result<Vec<String>, BoxError>> {
    Box::pin(async move { Ok(vec![format!("default:{p}")]) })
}

fn on_note(ctx: &Context, t: &Trace, name: &'static str, options: ListenOptions) {
    let t = t.clone();
    ctx.on_emit::<Note>(options, move |p| {
        push(&t, format!("{name}:{p}"));
        Ok(())
    })
    .unwrap();
}

#[test]
fn emit_runs_in_registration_order_and_prepend_goes_first() {
    let ctx = Context::new_root();
    let t = trace();
    on_note(&ctx, &t, "a", ListenOptions::default());
    on_note(&ctx, &t, "b", ListenOptions::default());
    on_note(&ctx, &t, "first", ListenOptions::PREPEND);
    ctx.emit::<Note>(&"x".to_string());
    assert_eq!(taken(&t), ["first:x", "a:x", "b:x"]);
}

#[test]
fn emit_contains_failing_and_panicking_listeners() {
    let ctx = Context::new_root();
    let t = trace();
    on_note(&ctx, &t, "a", ListenOptions::default());
    ctx.on_emit::<Note>(ListenOptions::default(), |_| Err("boom".into()))
        .unwrap();
    ctx.on_emit::<Note>(ListenOptions::default(), |_| panic!("listener panic"))
        .unwrap();
    on_note(&ctx, &t, "c", ListenOptions::default());
    ctx.emit::<Note>(&"y".to_string());
    assert_eq!(taken(&t), ["a:y", "c:y"]);
}

#[tokio::test]
async fn serial_awaits_in_order_and_stops_at_first_error() {
    let ctx = Context::new_root();
    let t = trace();
    for name in ["one", "two"] {
        let t = t.clone();
        ctx.on_serial::<Step>(ListenOptions::default(), move |p| {
            let t = t.clone();
            Box::pin(async move {
                tokio::task::yield_now().await;
                push(&t, format!("{name}:{p}"));
                Ok(())
            })
        })
        .unwrap();
    }
    ctx.on_serial::<Step>(ListenOptions::default(), |_| {
        Box::pin(async { Err("stop".into()) })
    })
    .unwrap();
    {
        let t = t.clone();
        ctx.on_serial::<Step>(ListenOptions::default(), move |_| {
            let t = t.clone();
            Box::pin(async move {
                push(&t, "never");
                Ok(())
            })
        })
        .unwrap();
    }
    let err = ctx.serial::<Step>(&7).await.unwrap_err();
    assert_eq!(err.to_string(), "stop");
    assert_eq!(taken(&t), ["one:7", "two:7"]);
}

#[tokio::test]
async fn parallel_awaits_all_then_reports_first_failure() {
    let ctx = Context::new_root();
    assert!(
        !ctx.parallel::<Flush>(&()).await.unwrap(),
        "no listener: nobody participated"
    );
    let t = trace();
    ctx.on_parallel::<Flush>(ListenOptions::default(), |_| {
        Box::pin(async { Err("first".into()) })
    })
    .unwrap();
    {
        let t = t.clone();
        ctx.on_parallel::<Flush>(ListenOptions::default(), move |_| {
            let t = t.clone();
            Box::pin(async move {
                tokio::task::yield_now().await;
                push(&t, "settled");
                Ok(())
            })
        })
        .unwrap();
    }
    let err = ctx.parallel::<Flush>(&()).await.unwrap_err();
    assert_eq!(err.to_string(), "first");
    assert_eq!(
        taken(&t),
        ["settled"],
        "the other listener still ran to completion"
    );
}

fn wrap(ctx: &Context, name: &'static str, options: ListenOptions) {
    ctx.on_waterfall::<Decide>(options, move |_p, next| {
        Box::pin(async move {
            let mut inner = next.run().await?;
            inner.insert(0, name.to_string());
            Ok(inner)
        })
    })
    .unwrap();
}

#[tokio::test]
async fn waterfall_is_an_onion_ending_in_the_default() {
    let ctx = Context::new_root();
    assert_eq!(
        ctx.waterfall::<Decide, _>(&"p".to_string(), &default_decision)
            .await
            .unwrap(),
        ["default:p"],
        "no listener: the default decides"
    );
    wrap(&ctx, "outer", ListenOptions::default());
    wrap(&ctx, "inner", ListenOptions::default());
    wrap(&ctx, "outermost", ListenOptions::PREPEND);
    assert_eq!(
        ctx.waterfall::<Decide, _>(&"p".to_string(), &default_decision)
            .await
            .unwrap(),
        ["outermost", "outer", "inner", "default:p"]
    );
}

#[tokio::test]
async fn waterfall_listener_that_skips_next_short_circuits() {
    let ctx = Context::new_root();
    wrap(&ctx, "outer", ListenOptions::default());
    ctx.on_waterfall::<Decide>(ListenOptions::default(), |p, _next| {
        Box::pin(async move { Ok(vec![format!("veto:{p}")]) })
    })
    .unwrap();
    wrap(&ctx, "unreached", ListenOptions::default());
    assert_eq!(
        ctx.waterfall::<Decide, _>(&"p".to_string(), &default_decision)
            .await
            .unwrap(),
        ["outer", "veto:p"]
    );
}

#[tokio::test]
async fn waterfall_errors_propagate_to_the_dispatcher() {
    let ctx = Context::new_root();
    wrap(&ctx, "outer", ListenOptions::default());
    ctx.on_waterfall::<Decide>(ListenOptions::default(), |_p, _next| {
        Box::pin(async move { Err("listener threw".into()) })
    })
    .unwrap();
    let err = ctx
        .waterfall::<Decide, _>(&"p".to_string(), &default_decision)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "listener threw");
}

#[test]
fn scoped_listeners_only_see_their_scope_and_descendants() {
    let root = Context::new_root();
    let t = trace();
    let agent_a = root.create_scope("agent-a");
    let agent_b = root.create_scope("agent-b");
    let child_of_a = agent_a.create_scope("child-of-a");
    on_note(&root, &t, "unscoped", ListenOptions::default());
    on_note(&agent_a, &t, "a", ListenOptions::default());
    on_note(&agent_b, &t, "b", ListenOptions::default());
    on_note(&child_of_a, &t, "child", ListenOptions::default());
    on_note(&agent_b, &t, "b-global", ListenOptions::GLOBAL);

    agent_a.emit::<Note>(&"for-a".to_string());
    assert_eq!(taken(&t), ["unscoped:for-a", "a:for-a", "b-global:for-a"]);

    child_of_a.emit::<Note>(&"for-child".to_string());
    assert_eq!(
        taken(&t),
        [
            "unscoped:for-child",
            "a:for-child",
            "child:for-child",
            "b-global:for-child"
        ],
        "events flow up the chain: the parent scope sees its child's events"
    );

    root.emit::<Note>(&"registry".to_string());
    assert_eq!(
        taken(&t),
        [
            "unscoped:registry",
            "a:registry",
            "b:registry",
            "child:registry",
            "b-global:registry"
        ],
        "an event without a carrier reaches everyone"
    );
}

#[derive(Debug)]
struct Store(&'static str);

#[tokio::test]
async fn unloading_a_plugin_unwinds_everything_it_registered() {
    let root = Context::new_root();
    let t = trace();
    let plugin = root.child("plugin");
    let nested = plugin.child("nested");
    on_note(&plugin, &t, "p", ListenOptions::default());
    on_note(&nested, &t, "n", ListenOptions::default());
    wrap(&plugin, "w", ListenOptions::default());
    plugin.provide(Arc::new(Store("s"))).unwrap();
    plugin.spawn(std::future::pending()).unwrap();
    {
        let t = t.clone();
        plugin
            .effect("custom", move || push(&t, "undo-custom"))
            .unwrap();
    }
    assert_eq!(root.listener_count(), 3);
    assert_eq!(root.service_count(), 1);
    assert_eq!(root.live_tasks(), 1);
    assert_eq!(
        plugin.fiber().effect_labels(),
        ["fiber", "listener", "listener", "service", "task", "custom"]
    );

    plugin.dispose();
    tokio::task::yield_now().await; // let the aborted task drop
    assert_eq!(
        taken(&t),
        ["undo-custom"],
        "effects unwind in reverse order"
    );
    assert_eq!(root.listener_count(), 0, "no listener remains");
    assert_eq!(root.service_count(), 0, "no service remains");
    assert_eq!(root.live_tasks(), 0, "no task remains");
    assert_eq!(plugin.fiber().live_effects(), 0);
    assert_eq!(
        nested.fiber().live_effects(),
        0,
        "children unload with their parent"
    );
    assert!(root.get::<Store>().is_none());

    root.emit::<Note>(&"after".to_string());
    assert_eq!(taken(&t), Vec::<String>::new());
    assert!(
        plugin
            .on_emit::<Note>(ListenOptions::default(), |_| Ok(()))
            .is_err(),
        "an unloaded plugin cannot register"
    );
}

#[test]
fn an_effect_handle_undoes_one_registration_early() {
    let root = Context::new_root();
    let t = trace();
    let handle = root
        .on_emit::<Note>(ListenOptions::default(), {
            let t = t.clone();
            move |p| {
                push(&t, p.clone());
                Ok(())
            }
        })
        .unwrap();
    root.emit::<Note>(&"1".to_string());
    handle.dispose();
    root.emit::<Note>(&"2".to_string());
    assert_eq!(taken(&t), ["1"]);
    assert_eq!(root.listener_count(), 0);
}

#[test]
fn missing_and_duplicate_services_are_clear_errors() {
    let root = Context::new_root();
    let consumer = root.child("consumer-plugin");
    let err = consumer.require::<Store>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin \"consumer-plugin\" requires service all::dispatch::Store, which no loaded plugin provides"
    );
    root.child("first").provide(Arc::new(Store("a"))).unwrap();
    let err = root
        .child("second")
        .provide(Arc::new(Store("b")))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "service all::dispatch::Store is already provided by \"first\"; \"second\" cannot provide it again"
    );
    assert_eq!(consumer.require::<Store>().unwrap().0, "a");
}
