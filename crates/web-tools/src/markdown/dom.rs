//! A minimal arena DOM built by html5ever's tree builder (the same HTML5 tree construction
//! a browser or domino performs). Nodes live in one `Vec` and refer to each other by index,
//! so neither building nor dropping a deep tree recurses.

use std::borrow::Cow;
use std::cell::{Ref, RefCell};

use html5ever::tendril::{StrTendril, TendrilSink};
use html5ever::tree_builder::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::{Attribute, QualName, local_name, ns, parse_document};

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Document,
    Element,
    Text(String),
    /// Comments, doctypes, processing instructions: dropped by the converter.
    Other,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub kind: Kind,
    pub name: QualName,
    pub attrs: Vec<(String, String)>,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

impl Node {
    fn new(kind: Kind, name: QualName) -> Self {
        Self {
            kind,
            name,
            attrs: Vec::new(),
            parent: None,
            children: Vec::new(),
        }
    }
}

/// The parsed document.
#[derive(Debug, Default)]
pub struct Dom {
    pub nodes: Vec<Node>,
}

fn no_name() -> QualName {
    QualName::new(None, ns!(), local_name!(""))
}

impl Dom {
    /// Parses `html` as a full HTML5 document.
    pub fn parse(html: &str) -> Self {
        let sink = Sink {
            nodes: RefCell::new(vec![Node::new(Kind::Document, no_name())]),
        };
        parse_document(sink, Default::default()).one(StrTendril::from(html))
    }

    /// Upper-case tag name of an element (`""` for other nodes), as the DOM reports it.
    pub fn tag(&self, id: usize) -> String {
        match self.nodes[id].kind {
            Kind::Element => self.nodes[id].name.local.to_string().to_ascii_uppercase(),
            Kind::Document | Kind::Text(_) | Kind::Other => String::new(),
        }
    }

    pub fn attr(&self, id: usize, name: &str) -> Option<&str> {
        self.nodes[id]
            .attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn is_element(&self, id: usize) -> bool {
        self.nodes[id].kind == Kind::Element
    }

    /// The first element (document order) whose `id` attribute is `value`.
    pub fn element_by_id(&self, value: &str) -> Option<usize> {
        let mut stack = vec![0];
        while let Some(n) = stack.pop() {
            if self.is_element(n) && self.attr(n, "id") == Some(value) {
                return Some(n);
            }
            stack.extend(self.nodes[n].children.iter().rev().copied());
        }
        None
    }

    /// All descendants of `id` in document order (iterative).
    pub fn descendants(&self, id: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack: Vec<usize> = self.nodes[id].children.iter().rev().copied().collect();
        while let Some(n) = stack.pop() {
            out.push(n);
            stack.extend(self.nodes[n].children.iter().rev().copied());
        }
        out
    }

    /// The concatenated text of `id`'s descendants.
    pub fn text_content(&self, id: usize) -> String {
        if let Kind::Text(t) = &self.nodes[id].kind {
            return t.clone();
        }
        let mut out = String::new();
        for n in self.descendants(id) {
            if let Kind::Text(t) = &self.nodes[n].kind {
                out.push_str(t);
            }
        }
        out
    }

    pub fn previous_sibling(&self, id: usize) -> Option<usize> {
        let parent = self.nodes[id].parent?;
        let siblings = &self.nodes[parent].children;
        let i = siblings.iter().position(|c| *c == id)?;
        i.checked_sub(1).map(|p| siblings[p])
    }

    pub fn next_sibling(&self, id: usize) -> Option<usize> {
        let parent = self.nodes[id].parent?;
        let siblings = &self.nodes[parent].children;
        let i = siblings.iter().position(|c| *c == id)?;
        siblings.get(i + 1).copied()
    }

    pub fn remove(&mut self, id: usize) {
        if let Some(parent) = self.nodes[id].parent.take() {
            self.nodes[parent].children.retain(|c| *c != id);
        }
    }

    /// Serializes `id` as HTML (for elements a table rule keeps as they are).
    pub fn outer_html(&self, id: usize) -> String {
        let mut out = String::new();
        enum Step {
            Open(usize),
            Close(usize),
        }
        let mut stack = vec![Step::Open(id)];
        while let Some(step) = stack.pop() {
            match step {
                Step::Open(n) => match &self.nodes[n].kind {
                    Kind::Text(t) => out.push_str(&escape_html(t, false)),
                    Kind::Element => {
                        let name = &self.nodes[n].name.local;
                        out.push('<');
                        out.push_str(name);
                        for (k, v) in &self.nodes[n].attrs {
                            out.push_str(&format!(" {k}=\"{}\"", escape_html(v, true)));
                        }
                        out.push('>');
                        if !is_void_name(name) {
                            stack.push(Step::Close(n));
                            stack.extend(
                                self.nodes[n].children.iter().rev().map(|c| Step::Open(*c)),
                            );
                        }
                    }
                    Kind::Document | Kind::Other => {}
                },
                Step::Close(n) => {
                    out.push_str("</");
                    out.push_str(&self.nodes[n].name.local);
                    out.push('>');
                }
            }
        }
        out
    }
}

fn is_void_name(name: &str) -> bool {
    matches!(
        name,
        "area"
            | "base"
            | "br"
            | "col"
            | "embed"
            | "hr"
            | "img"
            | "input"
            | "link"
            | "meta"
            | "param"
            | "source"
            | "track"
            | "wbr"
    )
}

fn escape_html(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '\u{a0}' => out.push_str("&nbsp;"),
            '"' if attribute => out.push_str("&quot;"),
            '<' if !attribute => out.push_str("&lt;"),
            '>' if !attribute => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

struct Sink {
    nodes: RefCell<Vec<Node>>,
}

impl Sink {
    fn push(&self, node: Node) -> usize {
        let mut nodes = self.nodes.borrow_mut();
        nodes.push(node);
        nodes.len() - 1
    }

    fn detach(nodes: &mut [Node], id: usize) {
        if let Some(parent) = nodes[id].parent.take() {
            nodes[parent].children.retain(|c| *c != id);
        }
    }

    fn insert(&self, parent: usize, at: Option<usize>, child: NodeOrText<usize>) {
        let mut nodes = self.nodes.borrow_mut();
        let index = at.unwrap_or(nodes[parent].children.len());
        match child {
            NodeOrText::AppendNode(id) => {
                Self::detach(&mut nodes, id);
                let index = index.min(nodes[parent].children.len());
                nodes[id].parent = Some(parent);
                nodes[parent].children.insert(index, id);
            }
            NodeOrText::AppendText(text) => {
                // Adjacent text merges, as in a DOM.
                let before = index.checked_sub(1).map(|i| nodes[parent].children[i]);
                if let Some(prev) = before
                    && let Kind::Text(t) = &mut nodes[prev].kind
                {
                    t.push_str(&text);
                    return;
                }
                let mut node = Node::new(Kind::Text(text.to_string()), no_name());
                node.parent = Some(parent);
                nodes.push(node);
                let id = nodes.len() - 1;
                nodes[parent].children.insert(index, id);
            }
        }
    }
}

impl TreeSink for Sink {
    type Handle = usize;
    type Output = Dom;
    type ElemName<'a> = Ref<'a, QualName>;

    fn finish(self) -> Dom {
        Dom {
            nodes: self.nodes.into_inner(),
        }
    }

    fn parse_error(&self, _msg: Cow<'static, str>) {}

    fn get_document(&self) -> usize {
        0
    }

    fn elem_name<'a>(&'a self, target: &'a usize) -> Ref<'a, QualName> {
        Ref::map(self.nodes.borrow(), |n| &n[*target].name)
    }

    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, _: ElementFlags) -> usize {
        let mut node = Node::new(Kind::Element, name);
        node.attrs = attrs
            .into_iter()
            .map(|a| (a.name.local.to_string(), a.value.to_string()))
            .collect();
        self.push(node)
    }

    fn create_comment(&self, _text: StrTendril) -> usize {
        self.push(Node::new(Kind::Other, no_name()))
    }

    fn create_pi(&self, _target: StrTendril, _data: StrTendril) -> usize {
        self.push(Node::new(Kind::Other, no_name()))
    }

    fn append(&self, parent: &usize, child: NodeOrText<usize>) {
        self.insert(*parent, None, child);
    }

    fn append_based_on_parent_node(
        &self,
        element: &usize,
        prev_element: &usize,
        child: NodeOrText<usize>,
    ) {
        let has_parent = self.nodes.borrow()[*element].parent.is_some();
        if has_parent {
            self.append_before_sibling(element, child);
        } else {
            self.append(prev_element, child);
        }
    }

    fn append_doctype_to_document(&self, _: StrTendril, _: StrTendril, _: StrTendril) {}

    fn get_template_contents(&self, target: &usize) -> usize {
        // Template contents are kept as the template's own children.
        *target
    }

    fn same_node(&self, x: &usize, y: &usize) -> bool {
        x == y
    }

    fn set_quirks_mode(&self, _mode: QuirksMode) {}

    fn append_before_sibling(&self, sibling: &usize, new_node: NodeOrText<usize>) {
        let (parent, index) = {
            let nodes = self.nodes.borrow();
            let Some(parent) = nodes[*sibling].parent else {
                return;
            };
            let index = nodes[parent].children.iter().position(|c| c == sibling);
            (parent, index)
        };
        self.insert(parent, index, new_node);
    }

    fn add_attrs_if_missing(&self, target: &usize, attrs: Vec<Attribute>) {
        let mut nodes = self.nodes.borrow_mut();
        for a in attrs {
            let key = a.name.local.to_string();
            if !nodes[*target].attrs.iter().any(|(k, _)| *k == key) {
                nodes[*target].attrs.push((key, a.value.to_string()));
            }
        }
    }

    fn remove_from_parent(&self, target: &usize) {
        Self::detach(&mut self.nodes.borrow_mut(), *target);
    }

    fn reparent_children(&self, node: &usize, new_parent: &usize) {
        let mut nodes = self.nodes.borrow_mut();
        let children = std::mem::take(&mut nodes[*node].children);
        for c in &children {
            nodes[*c].parent = Some(*new_parent);
        }
        nodes[*new_parent].children.extend(children);
    }
}
