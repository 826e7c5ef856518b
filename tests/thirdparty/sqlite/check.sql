-- Asked of the database file the guest wrote, and of the one the native build wrote, by the native shell.
.headers on
PRAGMA integrity_check;
SELECT count(*) AS orders, sum(qty) AS items, printf('%.2f', sum(qty * price)) AS revenue FROM orders;
SELECT * FROM city_totals ORDER BY revenue DESC;
SELECT name FROM sqlite_schema ORDER BY type, name;
SELECT c.name, max(o.qty) FROM customer c JOIN orders o ON o.customer_id = c.id GROUP BY c.name ORDER BY c.name;
