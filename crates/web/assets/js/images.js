// Images in a conversation: the composer's unsent images (paste/drop intake, an ordered
// row of thumbnails, removal), images of sent messages (read back through
// `session.attachment`, which answers only for images the session's log references), and
// a full-size viewer. Unsent images live only in this page as object URLs; the server
// stores an image when the message carrying it is accepted.

import { h, clear } from './util.js';
import { call } from './api.js';

export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'];
// The server's per-image cap (the attachment store's default maxImageBytes).
const MAX_IMAGE_BYTES = 20 * 1024 * 1024;

let draftCounter = 0;

function describe(file) {
  return file.name ? `“${file.name}”` : 'That file';
}

// The images waiting in the composer, in the order they were added.
export class DraftImages {
  constructor({ onChange } = {}) {
    this.items = [];
    this.onChange = onChange || (() => {});
    this.el = h('div', { class: 'draft-images hidden', 'data-testid': 'draft-images', role: 'list', 'aria-label': 'Images to send' });
  }

  get length() { return this.items.length; }

  // Adds the image files among `files`; returns a sentence for each file left out.
  add(files) {
    const refused = [];
    for (const file of files) {
      if (!IMAGE_TYPES.includes(file.type)) {
        refused.push(`${describe(file)} is not a PNG, JPEG, WebP or GIF image.`);
      } else if (file.size > MAX_IMAGE_BYTES) {
        refused.push(`${describe(file)} is larger than 20 MB.`);
      } else {
        this.items.push({ id: `draft-${++draftCounter}`, file, url: URL.createObjectURL(file) });
      }
    }
    this.render();
    return refused;
  }

  remove(id) {
    const at = this.items.findIndex((i) => i.id === id);
    if (at < 0) return;
    const [item] = this.items.splice(at, 1);
    URL.revokeObjectURL(item.url);
    this.render();
  }

  // Takes `items` out of the row without releasing them (a send in flight owns them).
  take(items) {
    this.items = this.items.filter((i) => !items.includes(i));
    this.render();
  }

  // Puts `items` back in front of anything added meanwhile (a failed send).
  restore(items) {
    this.items = [...items, ...this.items.filter((i) => !items.includes(i))];
    this.render();
  }

  release(items) {
    for (const i of items) URL.revokeObjectURL(i.url);
  }

  clear() {
    this.release(this.items);
    this.items = [];
    this.render();
  }

  render() {
    clear(this.el);
    this.el.classList.toggle('hidden', !this.items.length);
    this.items.forEach((item, n) => {
      const label = item.file.name || `image ${n + 1}`;
      const open = h('button', { class: 'draft-open', type: 'button', title: `View ${label}`, onclick: () => openViewer(item.url, label) },
        h('img', { class: 'draft-thumb', src: item.url, alt: label, 'data-testid': 'draft-thumb' }));
      const remove = h('button', { class: 'draft-remove', type: 'button', title: 'Remove image', 'aria-label': `Remove ${label}`, 'data-testid': 'draft-remove', onclick: () => this.remove(item.id) }, '×');
      this.el.append(h('div', { class: 'draft-image', role: 'listitem', 'data-draft': item.id }, open, remove));
    });
    this.onChange();
  }
}

// Lets a composer take images: a paste into `input` or a drop anywhere on `area` adds the
// image files to `drafts`; other files get a message. `enabled()` says whether the
// composer takes input now. Plain-text pastes stay the browser's own.
export function acceptImages(area, input, drafts, { enabled = () => !input.disabled, say = () => {} } = {}) {
  const add = (files) => {
    const refused = drafts.add(files);
    for (const why of refused) say(why);
    if (files.length > refused.length) input.focus();
  };
  input.addEventListener('paste', (e) => {
    const files = filesOf(e.clipboardData);
    if (!files.length) return;
    const hasText = !!(e.clipboardData.getData && e.clipboardData.getData('text/plain'));
    if (!hasText) e.preventDefault();
    if (enabled()) add(files);
  });
  area.addEventListener('dragover', (e) => {
    if (!e.dataTransfer || !Array.from(e.dataTransfer.types || []).includes('Files')) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = enabled() ? 'copy' : 'none';
    area.classList.add('drop-target');
  });
  area.addEventListener('dragleave', () => area.classList.remove('drop-target'));
  area.addEventListener('drop', (e) => {
    area.classList.remove('drop-target');
    const files = filesOf(e.dataTransfer);
    if (!files.length) return;
    e.preventDefault();
    if (enabled()) add(files);
  });
}

// The `session.prompt` content of a draft: the text (when any), then the images in order.
export async function promptContent(text, items) {
  const content = [];
  if (text.trim()) content.push({ type: 'text', text });
  for (const item of items) content.push(await promptPart(item));
  return content;
}

// The image files a paste or drop carries.
export function filesOf(transfer) {
  if (!transfer) return [];
  const files = Array.from(transfer.files || []);
  if (files.length) return files;
  return Array.from(transfer.items || []).filter((i) => i.kind === 'file').map((i) => i.getAsFile()).filter(Boolean);
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => {
      const url = String(r.result);
      resolve(url.slice(url.indexOf(',') + 1));
    };
    r.onerror = () => reject(new Error(`${describe(file)} could not be read.`));
    r.readAsDataURL(file);
  });
}

// The `session.prompt` part of one unsent image.
export async function promptPart(item) {
  const part = { type: 'image', mediaType: item.file.type, data: await base64Of(item.file) };
  if (item.file.name) part.name = item.file.name;
  return part;
}

// ---- images of sent messages ---------------------------------------------------------

// `${sessionId}\n${attachmentId}` → Promise of an object URL, while that session is shown.
const loaded = new Map();
const released = new Set();

function bytesOf(base64) {
  const text = atob(base64);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

function load(sessionId, ref) {
  const key = `${sessionId}\n${ref.attachmentId}`;
  let p = loaded.get(key);
  if (!p) {
    released.delete(sessionId);
    p = call('session.attachment', { sessionId, attachmentId: ref.attachmentId }).then((v) => {
      if (released.has(sessionId)) throw new Error('the conversation was closed');
      const type = (v.attachment && v.attachment.mediaType) || ref.mediaType;
      return URL.createObjectURL(new Blob([bytesOf(v.data)], { type }));
    });
    p.catch(() => loaded.delete(key));
    loaded.set(key, p);
  }
  return p;
}

// Frees every image URL of `sessionId` (its conversation is no longer shown).
export function releaseSession(sessionId) {
  released.add(sessionId);
  for (const [key, p] of loaded) {
    if (!key.startsWith(`${sessionId}\n`)) continue;
    loaded.delete(key);
    p.then((url) => URL.revokeObjectURL(url), () => {});
  }
}

// One image of a sent message: at most 240×240 px, its aspect kept, never enlarged; a
// click shows the original.
export function messageImage(sessionId, ref) {
  const label = ref.name || 'image';
  const box = h('button', { class: 'msg-image loading', type: 'button', title: `View ${label}`, 'data-testid': 'message-image', 'data-attachment': ref.attachmentId });
  const img = h('img', { alt: label, width: ref.width || undefined, height: ref.height || undefined });
  box.append(img);
  let url = null;
  box.addEventListener('click', () => { if (url) openViewer(url, label); });
  load(sessionId, ref).then((u) => {
    url = u;
    img.addEventListener('load', () => { box.classList.remove('loading'); box.dataset.loaded = 'true'; }, { once: true });
    img.src = u;
  }, (e) => {
    box.classList.remove('loading');
    box.classList.add('failed');
    box.disabled = true;
    clear(box).append(h('span', { class: 'msg-image-error' }, `Image unavailable: ${e.message}`));
  });
  return box;
}

// The images among `blocks` as a gallery, or null.
export function gallery(sessionId, blocks) {
  const images = (blocks || []).filter((b) => b && b.type === 'image' && b.attachment && b.attachment.attachmentId);
  if (!images.length) return null;
  return h('div', { class: 'msg-images' }, images.map((b) => messageImage(sessionId, b.attachment)));
}

// ---- the viewer ----------------------------------------------------------------------

export function openViewer(url, label) {
  const opener = document.activeElement;
  const img = h('img', { class: 'viewer-image', src: url, alt: label, 'data-testid': 'viewer-image' });
  const close = h('button', { class: 'viewer-close', type: 'button', 'aria-label': 'Close', 'data-testid': 'viewer-close' }, '×');
  const d = h('dialog', { class: 'viewer', 'data-testid': 'image-viewer', 'aria-label': label }, close, img);
  const done = () => { if (d.open) d.close(); };
  close.addEventListener('click', done);
  // A click on the backdrop lands on the dialog element itself.
  d.addEventListener('click', (e) => { if (e.target === d) done(); });
  d.addEventListener('close', () => {
    d.remove();
    if (opener && opener.isConnected && opener.focus) opener.focus();
  });
  document.body.append(d);
  d.showModal();
  close.focus();
  return d;
}
