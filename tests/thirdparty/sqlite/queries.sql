-- After the orders: an index, joins, GROUP BY with aggregates, ORDER BY, LIKE, a view, recursive CTEs, printf()
-- of doubles, a window, changes in a second transaction and the integrity check.
CREATE INDEX orders_by_customer ON orders(customer_id);
CREATE INDEX orders_by_item ON orders(item, qty);
SELECT count(*) AS orders, sum(qty) AS items, printf('%.2f', sum(qty * price)) AS revenue FROM orders;
SELECT c.name, count(o.id) AS n, sum(o.qty) AS qty, printf('%.3f', avg(o.price)) AS avg_price, min(o.price) AS lo,
       max(o.price) AS hi
  FROM customer c JOIN orders o ON o.customer_id = c.id GROUP BY c.id ORDER BY qty DESC, c.name LIMIT 10;
SELECT c.name FROM customer c LEFT JOIN orders o ON o.customer_id = c.id WHERE o.id IS NULL ORDER BY c.name;
SELECT item, count(*) AS n, sum(qty) AS qty FROM orders WHERE item LIKE '%bolt%' OR item LIKE 'w_dget%'
  GROUP BY item ORDER BY item;
SELECT name, city FROM customer WHERE name LIKE 'a%' OR city LIKE '%YORK' ORDER BY city, name;
SELECT o.item, c.city, count(*) AS n FROM orders o JOIN customer c ON c.id = o.customer_id
  WHERE o.qty BETWEEN 10 AND 12 GROUP BY o.item, c.city HAVING count(*) > 18 ORDER BY n DESC, o.item, c.city;
CREATE VIEW city_totals AS
  SELECT c.city, count(*) AS orders, round(sum(o.qty * o.price), 2) AS revenue
    FROM customer c JOIN orders o ON o.customer_id = c.id GROUP BY c.city;
SELECT * FROM city_totals ORDER BY revenue DESC;
WITH RECURSIVE fib(n, a, b) AS (SELECT 1, 0, 1 UNION ALL SELECT n + 1, b, a + b FROM fib WHERE n < 80)
  SELECT n, a FROM fib WHERE n % 10 = 0;
WITH RECURSIVE cnt(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM cnt LIMIT 100)
  SELECT sum(x) AS total, group_concat(x, ',') AS sevens FROM cnt WHERE x % 7 = 0;
WITH RECURSIVE days(d) AS (SELECT date('2024-02-26') UNION ALL SELECT date(d, '+1 day') FROM days WHERE d < '2024-03-02')
  SELECT group_concat(d || ':' || strftime('%w', d), ' ') AS week FROM days;
SELECT printf('%f|%.10f|%e|%g|%10.4f|%-10.2f|%+.3e|%.0f|%.15g', 3.14159265358979, 1.0 / 3, 6.02214076e23, 0.0001234,
              -2.5, 1e-7, 299792458.0, 2.5, 0.1) AS formatted;
SELECT 0.1 + 0.2 AS a, 1e300 * 1e10 AS b, -0.0 AS c, 1.0 / 7.0 AS d, round(2.675, 2) AS e,
       CAST(9007199254740993 AS REAL) AS f, 1e-310 AS g, sqrt(2) AS h, 10 / 3 AS i, 10 % 3 AS j;
SELECT customer_id, qty, sum(qty) OVER (PARTITION BY customer_id ORDER BY id ROWS 2 PRECEDING) AS running
  FROM orders WHERE id <= 15 ORDER BY customer_id, id;
BEGIN;
UPDATE orders SET qty = qty + 1 WHERE item = 'gizmo';
DELETE FROM orders WHERE qty > 45;
COMMIT;
SELECT count(*) AS orders, sum(qty) AS items FROM orders;
SELECT typeof(price) AS type, count(*) AS n FROM orders GROUP BY 1;
PRAGMA integrity_check;
PRAGMA foreign_key_check;
