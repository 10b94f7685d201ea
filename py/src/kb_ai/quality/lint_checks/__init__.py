"""``kaas lint``'s checks, by theme: each page by itself (``pages``), how pages reach each other
(``links``), where pages come from (``sources``). Each check reads a ``LintContext`` and returns
``Finding`` records; ``quality.lint.CHECKS`` lists them in the order they run."""
