// A small XML parser for the tests: enough of XML 1.0 to check that a generated document
// is well-formed (one root, properly nested and closed tags, quoted unique attributes,
// known entity references, no stray `<` or `&`) and to walk it. Throws on the first error.

const NAME = /[A-Za-z_:][\w.:-]*/y
const ENTITY = /&(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/y

function decode(text, where) {
  let out = ''
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (c === '<') throw new Error(`unescaped < in ${where}`)
    if (c !== '&') {
      out += c
      continue
    }
    ENTITY.lastIndex = i
    const m = ENTITY.exec(text)
    if (!m) throw new Error(`bad entity reference in ${where}: ${JSON.stringify(text.slice(i, i + 12))}`)
    const ref = m[0].slice(1, -1)
    out +=
      { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[ref] ??
      String.fromCodePoint(ref[1] === 'x' ? parseInt(ref.slice(2), 16) : parseInt(ref.slice(1), 10))
    i += m[0].length - 1
  }
  return out
}

/** Parses `text`; returns the root element `{ name, attrs, children, text }`. */
export function parseXml(text) {
  let i = 0
  const root = { name: '#document', attrs: {}, children: [], text: '' }
  const stack = [root]
  const top = () => stack[stack.length - 1]
  const expect = (s) => {
    if (!text.startsWith(s, i)) throw new Error(`expected ${JSON.stringify(s)} at ${i}`)
    i += s.length
  }
  const skipSpace = () => {
    while (i < text.length && /\s/.test(text[i])) i++
  }
  const readName = () => {
    NAME.lastIndex = i
    const m = NAME.exec(text)
    if (!m) throw new Error(`expected a name at ${i}: ${JSON.stringify(text.slice(i, i + 20))}`)
    i += m[0].length
    return m[0]
  }
  if (text.startsWith('<?xml')) {
    const end = text.indexOf('?>')
    if (end < 0) throw new Error('unterminated XML declaration')
    i = end + 2
  }
  while (i < text.length) {
    if (text.startsWith('<!--', i)) {
      const end = text.indexOf('-->', i + 4)
      if (end < 0) throw new Error('unterminated comment')
      i = end + 3
    } else if (text.startsWith('</', i)) {
      i += 2
      const name = readName()
      skipSpace()
      expect('>')
      const open = stack.pop()
      if (!open || open.name !== name) throw new Error(`</${name}> closes <${open && open.name}>`)
      if (stack.length === 0) throw new Error(`</${name}> closes the document`)
    } else if (text[i] === '<') {
      i++
      const name = readName()
      const element = { name, attrs: {}, children: [], text: '' }
      for (;;) {
        const before = i
        skipSpace()
        if (text.startsWith('/>', i)) {
          i += 2
          top().children.push(element)
          break
        }
        if (text[i] === '>') {
          i++
          top().children.push(element)
          stack.push(element)
          break
        }
        if (i === before) throw new Error(`expected whitespace before an attribute of <${name}> at ${i}`)
        const attr = readName()
        skipSpace()
        expect('=')
        skipSpace()
        const quote = text[i]
        if (quote !== '"' && quote !== "'") throw new Error(`unquoted attribute ${attr} of <${name}>`)
        const end = text.indexOf(quote, i + 1)
        if (end < 0) throw new Error(`unterminated attribute ${attr} of <${name}>`)
        if (attr in element.attrs) throw new Error(`duplicate attribute ${attr} of <${name}>`)
        element.attrs[attr] = decode(text.slice(i + 1, end), `attribute ${attr} of <${name}>`)
        i = end + 1
      }
    } else {
      const end = text.indexOf('<', i)
      const chunk = text.slice(i, end < 0 ? text.length : end)
      const decoded = decode(chunk, `text of <${top().name}>`)
      if (top() === root && decoded.trim() !== '') throw new Error('text outside the root element')
      top().text += decoded
      i = end < 0 ? text.length : end
    }
  }
  if (stack.length !== 1) throw new Error(`unclosed <${top().name}>`)
  const elements = root.children
  if (elements.length !== 1) throw new Error(`expected one root element, found ${elements.length}`)
  return elements[0]
}

/** Every element of the tree, depth first. */
export function* walk(element) {
  yield element
  for (const child of element.children) yield* walk(child)
}

/** The text of an element and all its descendants. */
export function textOf(element) {
  return element.text + element.children.map(textOf).join('')
}
