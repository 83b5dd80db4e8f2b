// xterm.js writes the styles it measures at run time into <style> elements,
// which the console's Content-Security-Policy (style-src 'self', no inline
// style) does not apply. adoptStyles mirrors each such element under root into
// a constructed stylesheet (document.adoptedStyleSheets), which no markup can
// make, so the policy stays strict and the terminal is styled.

export function adoptStyles(root) {
  const sheets = new Map();
  const sync = () => {
    for (const s of root.querySelectorAll('style')) {
      let sheet = sheets.get(s);
      if (!sheet) {
        sheet = new CSSStyleSheet();
        sheets.set(s, sheet);
        document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
      }
      const text = s.textContent || '';
      if (sheet.__text !== text) {
        sheet.replaceSync(text);
        sheet.__text = text;
      }
    }
  };
  const mo = new MutationObserver(sync);
  mo.observe(root, { subtree: true, childList: true, characterData: true });
  sync();
  return () => {
    mo.disconnect();
    const gone = new Set(sheets.values());
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !gone.has(s));
  };
}
